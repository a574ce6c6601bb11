"""The desktop app: what a double-click starts (launcher), its small window (window) and
the helper's report (doctor).

What this is not: the HTTP server. The launcher serves server/http/app.py's app on this
computer; nothing here is a route, and nothing under server/ outside this folder imports it
(the CLI does, lazily, so `flashdesk serve` never loads Tk).
"""
