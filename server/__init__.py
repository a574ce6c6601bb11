"""flashdesk server: the OpenAI-compatible HTTP API over the engine, and the CLI."""
