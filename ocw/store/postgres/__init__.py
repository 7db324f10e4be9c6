"""The PostgreSQL backend behind the same store interface (`OCW_DB=postgresql://...`):
the store (`store`), connections (`conn`), the schema and its migrations
(`schema`), the change listener that tells other kernels (`listen`), URL parsing
with its password kept out of every message (`url`), and a throwaway server for
tests and the benchmark (`cluster`). It may import the rest of `ocw.store` and
the layers below it; psycopg is imported only when a PostgreSQL URL is used.
"""
