"""context_ring.ipynb is driven cell by cell in a browser by tests/widgets/test_browser.py; it is not an
nbval notebook (the repo's addopts turn --nbval-lax on for every .ipynb under testpaths)."""
collect_ignore_glob = ["*.ipynb"]
