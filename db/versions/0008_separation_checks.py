"""separation checks: what cftools found about each person's server being theirs alone, linked from judgments

Revision ID: 0008
Revises: 0007
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "separation_checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("person", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("checked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("during", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("method", sa.Text(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("problems", sa.JSON(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_separation_checks_server", "separation_checks", ["server"])
    op.create_index("ix_separation_checks_person", "separation_checks", ["person"])
    # Judgments of old were never checked: NULL, which counts as not blind.
    op.add_column("judgments", sa.Column("separation_check_id", sa.Integer(), nullable=True))
    op.create_index("ix_judgments_separation_check_id", "judgments", ["separation_check_id"])


def downgrade() -> None:
    op.drop_index("ix_judgments_separation_check_id", table_name="judgments")
    with op.batch_alter_table("judgments") as batch:
        batch.drop_column("separation_check_id")
    op.drop_table("separation_checks")
