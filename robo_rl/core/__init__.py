"""Config engine, deploy contract, atomic files, asset lookup: numpy only, nothing of ours."""
