"""SFTP host keys pinned per company and host (SPEC 10 C6, #50) (placeholder: filled in by the change that needs it)

Revision ID: 20261206_0017
Revises: 20261206_0016
Create Date: 2026-12-06 20:20:00
"""

from collections.abc import Sequence

revision: str = "20261206_0017"
down_revision: str | None = "20261206_0016"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
