"""Persistence: sqlmodel tables, Alembic migrations and the SQL store (SQLite or PostgreSQL)."""
