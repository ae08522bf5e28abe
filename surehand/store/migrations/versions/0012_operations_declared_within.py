"""operations.declared_within: a journaled call linked to the declared effects it ran in

Claude Code's hooks journal every effectful tool call, also while the agent's own declared
effect is open (they used to skip those, and a decoy ``effect_begin`` silenced the journal).
Such a record names the open declared effects it ran within: a JSON list of operation ids,
NULL for none. The fingerprint stays the call's alone, so a successor still finds a repeated
call as already done.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("declared_within", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.drop_column("declared_within")
