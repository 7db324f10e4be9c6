"""Helpers and the notebook for tests/widgets/test_browser.py (a real JupyterLab in headless Chromium)."""
