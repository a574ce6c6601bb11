"""The work-order feature: templates (data files), the extraction prompt, dates, spans and
review checks. Its HTTP routes are server/http/routes/workorders.py."""
