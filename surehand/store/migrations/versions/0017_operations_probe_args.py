"""operations.probe_args: the arguments of the probe a declared effect names

Built-in probes (git.push, http.request, github.pull_request) need to know what to look at:
the remote, ref and commit of a push; the URL and what a yes looks like. An effect declares
them with the probe; they are kept with its intent (JSON, NULL for none), outside its
fingerprint.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("probe_args", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.drop_column("probe_args")
