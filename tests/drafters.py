"""Base for the test-only drafters: a drafter that keeps no state (nothing to attach, observe or forget)."""


class StatelessDrafter:
    name = "stateless"

    def attach(self, ctx) -> None:
        pass

    def observe(self, committed) -> None:
        pass

    def forget(self, seq_id) -> None:
        pass
