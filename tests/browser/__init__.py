"""Helpers and the notebook for tests/test_browser.py (a real JupyterLab in headless Chromium)."""
