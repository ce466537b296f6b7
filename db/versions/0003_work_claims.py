"""work claims: generation work leased by one worker at a time

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "work_claims",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generator", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("worker", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("lease_expires", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("finished_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("generator", "key"),
    )
    op.create_index("ix_work_claims_generator", "work_claims", ["generator"])


def downgrade() -> None:
    op.drop_index("ix_work_claims_generator", table_name="work_claims")
    op.drop_table("work_claims")
