"""The embedded DuckDB backend: the store over one file (`store`), the file and
its hand-over between kernels (`db`), the claim on a file and its upgrade
(`ownership`, the one entry to `migrations`), and the one connection
configuration (`settings`). Imports run db/ownership -> migrations, settings;
it may import the rest of `ocw.store` and the layers below it.
"""
