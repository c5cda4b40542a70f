"""The compatibility catalog: facts as data (``data/*.yaml``), read through small questions (``models``), loaded
and checked (``files``), with its companions, exclusions and performance floors; ``refresh/`` proposes new rows."""
