"""A SkyRL dataset module: parquet rows in SkyRL's shape, each scored by the SkyRL-gym environment it names.

nodus reads `train_files` / `val_files` (local paths here; `hf://datasets/owner/name/path.parquet` works too and
is fetched when the image is built). The module defines no `compute_score`: each row's `env_class` (`gsm8k`)
names the skyrl-gym 0.4 environment that scores it, built from the row as SkyRL's trainer builds it
(`skyrl_gym.make(env_class, env_config=..., extras=row)`). The files are written by `make_data.py`.
"""

train_files = "data/train.parquet"
val_files = "data/test.parquet"
