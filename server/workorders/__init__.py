"""The work-order API: templates (data files), the extraction prompt, review checks and routes."""
