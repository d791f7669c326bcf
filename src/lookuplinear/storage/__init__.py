"""Tables in files, checkpoints and the rows they track.

- :mod:`~lookuplinear.storage.tables`: :class:`~lookuplinear.TableStorage`, a table in a file.
- :mod:`~lookuplinear.storage.checkpoint`: :class:`~lookuplinear.Checkpoint`, its saving, what a
  segment holds, and the writes of a restore.
- :mod:`~lookuplinear.storage.restore`: a restore's checks against the model and optimizers and
  their staged state, before anything is written.
- :mod:`~lookuplinear.storage.segments`: a checkpoint directory's segment files and manifest.
- :mod:`~lookuplinear.storage.rowwatch`: the rows of each table a backward pass changed.
"""
