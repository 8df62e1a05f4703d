"""Tenants and their API keys, stored hashed."""
