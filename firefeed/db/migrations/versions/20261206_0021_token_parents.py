"""API tokens created over the API: each records the token that created it, and may carry a name (#53)

`parent_id` is the token whose request created this one (NULL: made by the operator, `firefeed token
create`). Revoking a token revokes every token below it in one recursive UPDATE (firefeed/runs/tokens.sql),
so a token minted from the page never outlives the one that minted it; the index serves that walk.
ON DELETE CASCADE for the same reason: nothing deletes a token row today (a company's deletion takes all of
them), but if something ever did, its children must not stay behind as roots nobody revoked.
`name` is the label the page shows (at most 100 characters, rendered as text).

Revision ID: 20261206_0021
Revises: 20261206_0020
Create Date: 2026-12-06 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261206_0021"
down_revision: str | None = "20261206_0020"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("parent_id", sa.BigInteger(), nullable=True))
    op.add_column("api_tokens", sa.Column("name", sa.String(length=100), nullable=True))
    op.create_foreign_key(
        "api_tokens_parent_id_fkey", "api_tokens", "api_tokens", ["parent_id"], ["id"], ondelete="CASCADE"
    )
    op.create_index("ix_api_tokens_parent_id", "api_tokens", ["parent_id"])


def downgrade() -> None:
    op.drop_index("ix_api_tokens_parent_id", table_name="api_tokens")
    op.drop_constraint("api_tokens_parent_id_fkey", "api_tokens", type_="foreignkey")
    op.drop_column("api_tokens", "name")
    op.drop_column("api_tokens", "parent_id")
