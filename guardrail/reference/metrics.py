"""Placeholder: being written."""


def metrics_page() -> str:
    return "# metrics\n\nBeing written.\n"
