"""Versioned REST routes (`/v1/...`): thin adapters from HTTP to the library."""
