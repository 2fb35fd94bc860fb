"""Placeholder: being written."""


def records_page() -> str:
    return "# records\n\nBeing written.\n"
