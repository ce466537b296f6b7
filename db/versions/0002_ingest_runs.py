"""ingest runs: one row per ingested file

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('ingest_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('format', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('file_sha256', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('n_records', sa.Integer(), nullable=False),
    sa.Column('n_sources_added', sa.Integer(), nullable=False),
    sa.Column('n_items_added', sa.Integer(), nullable=False),
    sa.Column('n_images_added', sa.Integer(), nullable=False),
    sa.Column('n_skipped', sa.Integer(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )


def downgrade() -> None:
    op.drop_table("ingest_runs")
