"""dataset licences: each ingest records its source's licence; items remember the dataset they came from

Revision ID: 0004
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_licences",
        sa.Column("dataset", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("licence", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("dataset"),
    )
    # batch mode: SQLite cannot ALTER a table beyond adding columns without it, and it costs nothing elsewhere
    with op.batch_alter_table("items") as batch:
        batch.add_column(sa.Column("dataset", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
    with op.batch_alter_table("ingest_runs") as batch:
        batch.add_column(sa.Column("dataset", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch.add_column(sa.Column("licence", sqlmodel.sql.sqltypes.AutoString(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ingest_runs") as batch:
        batch.drop_column("licence")
        batch.drop_column("dataset")
    with op.batch_alter_table("items") as batch:
        batch.drop_column("dataset")
    op.drop_table("dataset_licences")
