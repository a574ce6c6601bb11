"""The speculative step: draft -> select -> verify -> accept -> commit."""
