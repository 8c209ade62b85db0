-- This transaction's lock_timeout: $1 (text, as SET takes it: '800ms').
SELECT set_config('lock_timeout', $1, true)
