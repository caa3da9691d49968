"""The original insitubatch's ``insitubatch.store``: ``from insitubatch.store import
obstore_store`` gets the root's function. The attribute ``insitubatch.store`` stays the
root's ``store()`` function (the package imports this module first), so
``import insitubatch.store as m`` binds that function, not this module: use the ``from`` form."""

from .geometry import open_geometries
from .stores import arraylake_store, close_store, ensure_local_dir, fsspec_store, icechunk_store, obstore_store

__all__ = ["arraylake_store", "close_store", "ensure_local_dir", "fsspec_store", "icechunk_store", "obstore_store",
           "open_geometries"]
