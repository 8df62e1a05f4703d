from stratamem.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
