"""The ``postgres`` session store: transcripts in PostgreSQL, one row per record,
written with a fencing epoch (see docs/cluster.md, "Session store").

The package is split so that loading the plugin costs nothing: :mod:`.plugin`
(the hooks) imports neither psycopg nor the store; :mod:`.store` (the store,
psycopg 3 and psycopg-pool, ``pip install 'lich-agent[postgres]'``) and
:mod:`.schema` (the migrations) are imported when a store is first made.
"""
