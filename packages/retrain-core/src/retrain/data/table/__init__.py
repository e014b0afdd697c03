"""The `dataset` source: any table of prompts (files, folders, globs, a `save_to_disk` folder, a
cached hub id) read through `datasets` and Arrow, mapped to examples by `[data]`'s keys, kept in
Arrow and walked lazily (docs/data.md)."""
