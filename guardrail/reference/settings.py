"""Placeholder: being written."""


def settings_page() -> str:
    return "# settings\n\nBeing written.\n"
