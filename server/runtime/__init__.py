"""The runtime room: the model the server serves (`served.Runtime`: loading, switching, admitting),
the backend engine that serves an OpenAI-compatible server in its place (`backend`, over the wire in
`backend_wire`), the bridge from the engine's thread to asyncio, and what the server publishes about
speculation. Nothing here knows a route."""
