"""task assignees: each annotation task is assigned to one person (cftools owns assignment)

Revision ID: 0006
Revises: 0005
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("annotation_tasks") as batch:
        batch.add_column(sa.Column("assignee", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch.create_index("ix_annotation_tasks_assignee", ["assignee"])


def downgrade() -> None:
    with op.batch_alter_table("annotation_tasks") as batch:
        batch.drop_index("ix_annotation_tasks_assignee")
        batch.drop_column("assignee")
