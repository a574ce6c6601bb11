"""The shell: pages load, navigation works, the server's status shows."""


def test_shell_loads_and_navigates(tab):
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    assert "smollm2" in page.inner_text("#server-status")
