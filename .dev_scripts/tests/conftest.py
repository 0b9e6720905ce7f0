from helpers import shared_data  # noqa: F401 (a fixture)
