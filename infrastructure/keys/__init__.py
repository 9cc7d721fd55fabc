"""Stored records and their keys: the mapper, per-subject keys, the cipher.

- ``mapper``: pydantic events ⇄ stored events (upcasting, compression, cipher);
- ``subject_mapper``: events and snapshots under their data subject's key;
- ``lineage``: whose content a record carries (a fork's records);
- ``subject_keys``: per-subject data keys: erasure by crypto-shredding;
- ``key_tables``: the two tables the keys are kept in (``memory_key_table``: in memory);
- ``wrapping``: a data key wrapped under the master key, the table's check row;
- ``key_modes``: a store's key mode (keys wrapped under a master key, or stored as they are);
- ``key_fence``: the write fence (a record is stored only while its keys live);
- ``key_store``: the key tables in a store of their own (``Settings.key_store``);
- ``key_factory``: the key table and write fence a store's factory gives its mapper
  and recorder;
- ``new_keys``: a subject's first key, written in the transaction of its first records;
- ``aead``: AES-GCM through OpenSSL, in eventsourcing's byte layout;
- ``erasure_store``: what an erasure deletes beside the key: snapshots.

May import: summarizers, counting, the layer's loose modules, the application layer
and the domain.
"""
