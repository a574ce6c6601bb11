"""The HTTP room: the FastAPI app, its guards, the request schemas, the one error table, OpenAI's
wire objects, the browser UI's files, and the routes. It reads the served model only through
server/runtime/ and keeps state only through server/stores/."""
