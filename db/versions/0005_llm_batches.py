"""llm batches: request files sent to a Batches API, kept until their results are stored

Revision ID: 0005
Revises: 0004
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "llm_batches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generator", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("backend", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("input_file_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("batch_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("completed", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("completion_window", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_llm_batches_generator", "llm_batches", ["generator"])
    op.create_index("ix_llm_batches_batch_id", "llm_batches", ["batch_id"])
    op.create_index("ix_llm_batches_state", "llm_batches", ["state"])


def downgrade() -> None:
    op.drop_index("ix_llm_batches_state", table_name="llm_batches")
    op.drop_index("ix_llm_batches_batch_id", table_name="llm_batches")
    op.drop_index("ix_llm_batches_generator", table_name="llm_batches")
    op.drop_table("llm_batches")
