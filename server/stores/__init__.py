"""The stores room: flashdesk's own files on disk that outlive a request: the work-order audit
log and the chat history (both SQLite, opened by `sqlite_file`), and the store's background jobs."""
