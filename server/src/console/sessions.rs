//! The console's sign-ins: each a random session id (the browser's `HttpOnly` cookie) standing
//! for the credential it signed in with, which stays in the server's memory and never reaches a
//! page, a URL or a log; and a random CSRF token the page must send back on every call. At most
//! [`MAX_SESSIONS`] are held; each ends [`IDLE_FOR`] after its last call, [`LIVES_FOR`] after it
//! began, or when it signs out.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ring::rand::{SecureRandom, SystemRandom};

/// Sessions held at once; a sign-in past it is refused until one ends.
pub(crate) const MAX_SESSIONS: usize = 256;
/// A session unused this long ends.
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(30 * 60);
/// A session ends this long after it began, used or not.
pub(crate) const LIVES_FOR: Duration = Duration::from_secs(12 * 60 * 60);

/// What a session stands for.
#[derive(Clone)]
pub(crate) struct Session {
    /// The credential it signed in with (`None`: an open server's, which needs none).
    pub(crate) credential: Option<String>,
    /// What the page sends back in `x-trestle-csrf`.
    pub(crate) csrf: String,
}

struct Held {
    session: Session,
    began: Instant,
    used: Instant,
}

/// The sessions of one console.
pub(crate) struct Sessions {
    held: Mutex<HashMap<String, Held>>,
    random: SystemRandom,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            held: Mutex::default(),
            random: SystemRandom::new(),
        }
    }
}

/// Why a sign-in was not kept.
#[derive(Debug)]
pub(crate) enum SignInRefused {
    /// [`MAX_SESSIONS`] are held.
    Full,
    /// The system's random source failed.
    NoRandom,
}

impl Sessions {
    /// A new session for `credential`: its id and what it stands for.
    pub(crate) fn open(
        &self,
        credential: Option<String>,
    ) -> Result<(String, Session), SignInRefused> {
        let id = self.random_hex()?;
        let session = Session {
            credential,
            csrf: self.random_hex()?,
        };
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.retain(|_, h| alive(h, now));
        if held.len() >= MAX_SESSIONS {
            return Err(SignInRefused::Full);
        }
        let kept = Held {
            session: session.clone(),
            began: now,
            used: now,
        };
        held.insert(id.clone(), kept);
        Ok((id, session))
    }

    /// The live session `id` names, counted as used now.
    pub(crate) fn find(&self, id: &str) -> Option<Session> {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let found = held.get_mut(id)?;
        if !alive(found, now) {
            held.remove(id);
            return None;
        }
        found.used = now;
        Some(found.session.clone())
    }

    /// Ends session `id`.
    pub(crate) fn close(&self, id: &str) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.remove(id);
    }

    /// 32 random bytes, in hex.
    fn random_hex(&self) -> Result<String, SignInRefused> {
        let mut bytes = [0u8; 32];
        self.random
            .fill(&mut bytes)
            .map_err(|_| SignInRefused::NoRandom)?;
        Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }
}

fn alive(held: &Held, now: Instant) -> bool {
    now.duration_since(held.used) < IDLE_FOR && now.duration_since(held.began) < LIVES_FOR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_id_until_it_is_closed() {
        let sessions = Sessions::default();
        let (id, session) = sessions.open(Some("key".into())).unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(session.csrf, id);
        let found = sessions.find(&id).unwrap();
        assert_eq!(found.credential.as_deref(), Some("key"));
        assert_eq!(found.csrf, session.csrf);
        assert!(sessions.find("not-a-session").is_none());
        sessions.close(&id);
        assert!(sessions.find(&id).is_none());
    }

    #[test]
    fn sign_ins_past_the_cap_are_refused() {
        let sessions = Sessions::default();
        for _ in 0..MAX_SESSIONS {
            sessions.open(None).unwrap();
        }
        assert!(matches!(sessions.open(None), Err(SignInRefused::Full)));
    }
}
