"""authoring funnel: the prompt variant a draft was made with, and the rejected item a redone draft replaces

Revision ID: 0009
Revises: 0008
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: the default template of its generator (every draft made before variants existed).
    op.add_column("generations", sa.Column("prompt_variant", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
    op.create_index("ix_generations_prompt_variant", "generations", ["prompt_variant"])
    # NULL: a first draft; otherwise the item (rejected or flagged) this one was drafted again from.
    op.add_column("items", sa.Column("redo_of", sa.Integer(), nullable=True))
    op.create_index("ix_items_redo_of", "items", ["redo_of"])


def downgrade() -> None:
    op.drop_index("ix_items_redo_of", table_name="items")
    with op.batch_alter_table("items") as batch:
        batch.drop_column("redo_of")
    op.drop_index("ix_generations_prompt_variant", table_name="generations")
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("prompt_variant")
