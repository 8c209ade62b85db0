-- The scheduler stops listening (it no longer leads, or wake-ups flood).
UNLISTEN *
