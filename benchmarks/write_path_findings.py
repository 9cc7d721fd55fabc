"""What benchmarks/write_path.py's section says the profile and the code showed, and what
changed on the write path: the text printed under the section's targets.
"""

from __future__ import annotations

FINDINGS = [
    "What the profile and the code showed, and what changed:",
    "",
    "- **PostgreSQL, eventsourcing's recorder**: a pre-ping per pooled checkout (a round trip), "
    "then BEGIN, SET LOCAL, LOCK TABLE ... IN EXCLUSIVE MODE, NOTIFY and INSERT pipelined up to a "
    "sync (a round trip), then COMMIT (a round trip). The table lock is held across the last two "
    "round trips, so on 2 shared cores a writer descheduled while holding it stalls every other "
    "writer. The ledger's `PostgresConversationRecorder` first sent one prepared call of a "
    "server-side function (lock, notify, insert) in autocommit: one round trip, no pre-ping, the lock "
    "held only while the server inserts and commits. Concurrent appends of one process share the "
    "save's statement and its commit (group commit).",
    "- **No table lock, no NOTIFY**: the lock, and NOTIFY's cluster-wide lock, were held through "
    "every commit's flush, so separate writer processes committed one at a time where plain INSERTs "
    "share flushes. The save is now one prepared INSERT (one event: plain parameters, no composite "
    "array to encode in Python); ids come from the sequence and readers stop at the highest id up to "
    "which the log is final (`max_notification_id`, see docs/architecture.md).",
    "- **Python per append**: pydantic re-ran the message's shape check, which built its JSON, on "
    "every copy (4 per append); eventsourcing's save checked each object against two runtime "
    "protocols; the role's tokens were encoded per message. Those are gone; what remains is the "
    "domain command (validation, token count, digest chain, events), the mapper and the driver.",
    "- **One warm connection for saves (PostgreSQL)**: a pool checkout per save took the pool's "
    "connections in turn, so each save woke a server process that had gone cold (measured: about "
    "120 µs more per save than the same statement on one connection), and psycopg's cursor path "
    "(query conversion, row factory) cost about 60 µs of CPU. A process's saves now keep one "
    "connection of their own, outside the pool, and send a lone event through libpq: a statement "
    "prepared once, four binary parameters, the id read back in binary (about 125 µs and 16 µs of "
    "CPU per save alone, against 240 µs and 70 µs before).",
    "- **Snapshots (PostgreSQL)** went through the library's array of a composite type, which "
    "psycopg encodes as text, escaping every byte of a snapshot's tens of KB (a tenth of an "
    "append's time at the default interval of 50); they are now written as four binary arrays.",
    "- **SQLite** saves run the same statements (BEGIN, INSERT, COMMIT) without the library's "
    "nested context managers, and the pool hands out the connection returned last: taken in turn, "
    "each save found its connection's page cache dropped by another connection's write and read its "
    "pages again (six reads per append, counted with strace; now about one).",
    "- **Policy threads in every writer process** polled the log and saved a tracking row 20 times "
    "a second each, and each summarized every threshold in the shared log: one crossing cost one "
    "summarizer call and one conversation load per process, and the losers' saves conflicted. Idle "
    "followers now back off to one poll a second; a threshold saved by another process waits 2 s "
    "and is summarized only if it is still the pending one.",
    "- **Other processes' thresholds** still cost each writer's policy thread a load of that "
    "conversation (snapshot and events) two seconds later, only to find it summarized. The policy "
    "now reads the summaries too, and a summary that answers the threshold it waits for settles it; "
    "a threshold not due yet no longer keeps the thread polling every 50 ms, and a read bounded by "
    "the head no longer asks once more for an empty page.",
    "- **The mapper** dumped an event to Python values and then to JSON text; pydantic-core now "
    "writes the same JSON values in one pass (measured: a ~600-byte message event 10.3 -> 4.3 µs, "
    "a 60 KB snapshot 476 -> 111 µs), NaN and infinities kept as JSON's constants as before. The "
    "digest chain's canonical JSON of a text message is spelled directly (3.9 -> 1.0 µs), the same "
    "text as the dumped dict.",
    "- **An append passed over the whole window** twice (the view's cost against the cap, the "
    "unsummarized tokens against the trigger) and a snapshot of the whole window was taken every 50 "
    "versions, so with a long window (a token trigger over short messages) an append cost 151, 346 "
    "and 1,101 µs at 100, 1,000 and 5,000 messages (memory://). Both sums now run on from append to "
    "append and a long window is snapshotted about every quarter window: see the window table.",
    "- **Several processes on one conversation**: a conflicting save evicted the cached conversation, so "
    "every retry reloaded it from its snapshot. After a first conflict a conversation's commands now keep a "
    "copy of the state (copied lists, shared frozen models) for five seconds, and a conflict returns the "
    "cached copy to it and folds in the other writers' events from the log.",
    "- **A busy writer's policy thread** still stepped 13-20 times a second in every writer process "
    "(its own threshold woke it, a finished summary woke it, and a step that found work polled again "
    "50 ms later), each step reading the log's head and the new thresholds and summaries, and it wrote "
    "its progress row in a transaction at each step: 51 µs of the policy thread's CPU per append in "
    "8-process runs, and about a fifth of their throughput (measured with the policy thread off). It "
    "now takes its own process's thresholds from its saves, reads the log once a second for other "
    "processes' thresholds (which wait 2 s anyway), and writes its progress row at most once a "
    "second while busy: 6-7 µs per append.",
    "- **SQLite's statement cache**: the library opens its connections with `cached_statements=True`, "
    "a cache of one compiled statement, and the BEGIN before each INSERT evicted it, so every save "
    "compiled the INSERT again (measured: 126 -> 97 µs of CPU per save). A save of one event is now "
    "its INSERT alone, in autocommit (SQLite runs it as its own transaction).",
    "- **Bookkeeping per append**: the store's saves built the recordings eventsourcing's `save` "
    "returns (a notification and a recording object per event), which nothing of the ledger's read; "
    "folding an append wrote six state fields through pydantic's `__setattr__`; the byte limit "
    "serialized every message to measure it; a lone save went through the group commit's queue. "
    "Now: a save without recordings (a subclass hooking `_notify` still gets them), direct field "
    "writes, a bound that spares a short text message the serialization, and an idle group commit "
    "that writes at once. Counted with callgrind, which gives the same count from run to run on a "
    "shared machine: an append after 400 (1,800 appends, summaries recorded inline) runs 635,209 -> "
    "570,424 instructions on PostgreSQL (-10.2%) and 609,054 -> 547,193 on memory:// (-10.2%); "
    "the writer processes take about two thirds of the machine's CPU in an 8-writer run (sampled "
    "with perf on 2026-11-25: 64%, the server 27%).",
    "- **Where the limit is now**: every cost left is CPU, spread thin: the domain command (validation, "
    "token count, digest chain, events), the save path (bookkeeping, the mapper, the driver's send and "
    "wait), parsing the message; no single function above 5% of its own. Sending a statement and "
    "waiting for its answer cost the same in both systems (on the machine of the tables above, 35 + "
    "34 µs of a client's CPU per statement, nearly all of it the kernel's loopback TCP). The figures "
    "that follow were read on an earlier machine; on the machine of the tables above a memory:// "
    "append took 150-210 µs of CPU (policy thread running), so compare ratios, not microseconds, "
    "across runs. The same Python costs "
    "about twice as much when every append blocks: a memory:// append (no I/O) is 74 µs of CPU; made "
    "to sleep 200 µs per append, as a round trip or a commit's flush does, the same code costs 166 µs "
    "(the tokenizer 8.9 -> 14.8 µs, building the event 3.4 -> 7.5, the digest 2.7 -> 7.3: cold "
    "caches). So on a store every microsecond of Python saved is worth about two. The table's last "
    "column shows the writers' CPU per append against the plain writer's. The server's CPU, read from "
    "/proc over the timed part of 8-process runs (backends alive at both readings), was 104-146 µs "
    "per append against the plain INSERT's 58-65 µs; most of it in the save connections' backends. "
    "The same INSERT into a table of the event table's shape (two indexes, a sequence, the ~600-byte "
    "row), sent by 8 light processes, accounts for about 11 µs of that gap (75 against 64 µs); "
    "snapshots, summaries and the followers' reads for a few more; the rest is the same work run "
    "with colder caches beside heavier client processes. Without snapshots and without the policy "
    "thread the server still spent 107 µs per append and the writers 209 µs.",
    "- **Where a SQLite append's time goes now** (counted with callgrind, an append after 60, policy "
    "thread off, per-subject keys and the write fence on, as by default): 746,158 instructions per "
    "append (821,940 before this round) against the plain INSERT + commit's 76,936, with the same "
    "system calls per append (strace: one `fdatasync`, six `fcntl` locks, 5.4 `pwrite` against "
    "4.6: the record is larger). By library (counted before this round): the interpreter 476k, "
    "pydantic-core 125k (the message's validation, the event's and the window entry's, the "
    "event's JSON, snapshots), tiktoken 111k (the token count), libc 57k, SQLite 36k, OpenSSL 25k "
    "(AES-GCM, SHA-256). No single function stands out; the statements are one fenced INSERT in "
    "autocommit (its compiled form cached), the commit's one `fdatasync` being what the plain "
    "INSERT pays too. So the ratio to a plain INSERT is the Python of the domain command and the mapper over "
    "one fsync: about 150 µs of CPU on an idle machine.",
    "- **Fewer instructions per SQLite append** (callgrind, `PYTHONHASHSEED=0`: the instructions of a"
    " run of 60 + 300 appends less those of 60 + 100, over 200; policy thread off, so the window "
    "grows to 360 messages and its snapshots with it; per-subject keys and the fence on, as by "
    'default): 934,345 on the commit before. An append of the usual `{"role", "content": str}` dict '
    "no longer asks the three wire adapters whether they claim it (none does; a unit property checks "
    "it), and a save enters the new-key deferral as a class, not a generator: 912,863. A window entry"
    " leaves `hidden=False` out of its dumps in pydantic-core (`Field(exclude_if=...)`, pydantic "
    "2.11+; the wrap serializer on older ones), not through a wrap serializer that turned every entry"
    " into Python values and back, so a snapshot costs less (same bytes, checked by the golden logs "
    "and a unit test): 835,476 (-10.6% in all). Left per append in that count: tiktoken's exact count"
    " ~95k (its regex split), the SQLite INSERT ~61k, snapshots amortized ~115k (the serialization of"
    " a long window: about 0.7 µs per entry), three pydantic validations, the event's JSON, and the "
    "rest spread thin over about 350 Python calls. Latency and CPU per append on a machine at load "
    "10-13 moved within their noise (the SQLite ratio read 1.71-9.05 in the same runs), so the "
    "target's ratio waits for the idle machine's run.",
    "- **A conversation's first write** made its data key in a transaction of its own before the "
    "`Started` record (a read of the conversation's subject, of the subject's key row, of the master "
    "key's check row, then an INSERT and a commit with its fsync): on SQLite the key's row is now "
    "inserted in the transaction of the first record (`infrastructure/keys/new_keys.py`), checked "
    "there: `ON CONFLICT DO NOTHING`, only while the check row names this process's master key (checked "
    "in full once per process), and for a conversation taken to be its own subject only if it names "
    "none; the fence then refuses the record if its key is not in the table, and the save is mapped "
    "again with the table's key (or refused for its tombstone). The SQLite pool's connections now "
    "keep 128 compiled statements (Python's default) instead of the library's one, so the first "
    "write's BEGIN and key row no longer evict the append's INSERT, nor a reader's queries one "
    "another. See the first-write section.",
    "- **A process's footprint**: `import contextledger` loaded the openai SDK (71,000 objects) for "
    "the OpenAI summarizer, so every full garbage collection of a writer walked them too, a pause "
    "its appends wait out now and then (more than twice as long: see benchmarks/footprint.py's "
    "section). The SDK now loads on first use.",
    "- **An idle policy thread** was woken by every save and ran a step: `max(notification_id)` and "
    "a topic-filtered read of the new notifications, with the thread switches, on every append. Now "
    "only a save that stores a `ThresholdReached` wakes it; other writes are found by its poll.",
    "- **`memory://` context()** brings the cached conversation up to date by asking for the events "
    "after its version; eventsourcing's in-memory recorder scanned every version of the conversation "
    "for that (O(history)). `WindowedPOPORecorder` walks up from the cached version.",
    "- **Cold load**: opening a ledger with its policy thread built the offline summarizer at once, "
    "loading the tokenizer; it is now built for the first summary. The conversation loads from its "
    "latest snapshot (bounded state, every 50 versions) plus the events after it.",
    "",
]
