"""`cftools report`: where items die and what they cost, from the store alone.

- `facts`: one row of facts per item (its cells of the funnel, its generator, its judgments) and what each model
  call cost, read from the store in a few column queries (a store of 100,000 items in seconds);
- `report`: the JSON twin (`cftools report --json`): the funnel per kind and group and per generator, cost per
  accepted item, why items die, the redo counts (their one definition), acceptance over time (in all and per kind)
  and the sections other parts compute (calibration, variants);
- `page`: the self-contained HTML page (no network, a strict CSP) with its plots and the drill-down to items (by
  funnel cell or by words searched).
"""
