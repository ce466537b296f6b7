"""annotator quality: control items, the outcomes of control and audit tasks, paused people

Revision ID: 0007
Revises: 0006
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "control_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("origin", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("shown_answer", sa.Text(), nullable=True),
        sa.Column("expected_ok", sa.Boolean(), nullable=False),
        sa.Column("settled", sa.JSON(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_control_items_item_id", "control_items", ["item_id"], unique=True)
    op.create_index("ix_control_items_kind", "control_items", ["kind"])
    op.create_table(
        "task_outcomes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("person", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("expected_ok", sa.Boolean(), nullable=True),
        sa.Column("given_ok", sa.Boolean(), nullable=False),
        sa.Column("correct", sa.Boolean(), nullable=True),
        sa.Column("lead_time", sa.Float(), nullable=True),
        sa.Column("judged_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["annotation_tasks.id"]),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_task_outcomes_task_id", "task_outcomes", ["task_id"], unique=True)
    op.create_index("ix_task_outcomes_item_id", "task_outcomes", ["item_id"])
    op.create_index("ix_task_outcomes_kind", "task_outcomes", ["kind"])
    op.create_index("ix_task_outcomes_role", "task_outcomes", ["role"])
    op.create_index("ix_task_outcomes_person", "task_outcomes", ["person"])
    op.create_table(
        "person_pauses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("person", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("paused_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("paused_by", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("resumed_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("resumed_by", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_person_pauses_person", "person_pauses", ["person"])


def downgrade() -> None:
    op.drop_table("person_pauses")
    op.drop_table("task_outcomes")
    op.drop_table("control_items")
