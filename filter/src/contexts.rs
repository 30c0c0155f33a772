//! The contexts of one VM, by the ids the host gives them: one root context per plugin that shares
//! the VM (Envoy gives plugins with the same vm_config one VM per worker, e.g. a client and a server
//! role) and one request context per HTTP stream, made by its root and kept with its root's id (a
//! stream's callbacks run on its root's state). Their types are known, so they live in vectors
//! beside their ids (no boxes, no hash maps); a callback is most often for one of the latest
//! streams, so lookups go newest first. Host-free: `dispatch` keeps the VM's one `Contexts` and
//! routes the host's callbacks through it.

pub struct Contexts<R, S> {
    roots: Vec<(u32, R)>,
    /// Each stream's id, its root's id, and the stream.
    streams: Vec<(u32, (u32, S))>,
}

/// Where context `id` is in `contexts`, newest first.
fn index_of<T>(contexts: &[(u32, T)], id: u32) -> Option<usize> {
    contexts.iter().rposition(|(c, _)| *c == id)
}

impl<R, S> Contexts<R, S> {
    pub const fn new() -> Self {
        Contexts { roots: Vec::new(), streams: Vec::new() }
    }

    /// A root context (`root_id` 0), made by `new_root`, or a request context of root `root_id`,
    /// made by `new_stream` from that root (none if the root is unknown).
    pub fn create(
        &mut self,
        context_id: u32,
        root_id: u32,
        new_root: impl FnOnce() -> R,
        new_stream: impl FnOnce(&R) -> S,
    ) {
        if root_id == 0 {
            self.roots.push((context_id, new_root()));
        } else if let Some(stream) = self.root(root_id).map(|root| new_stream(root)) {
            self.streams.push((context_id, (root_id, stream)));
        }
    }

    pub fn root(&mut self, id: u32) -> Option<&mut R> {
        index_of(&self.roots, id).map(|at| &mut self.roots[at].1)
    }

    /// Stream `id` and its root (None if either is gone: a stream outliving its root is dropped
    /// from callbacks).
    pub fn stream(&mut self, id: u32) -> Option<(&mut R, &mut S)> {
        let at = index_of(&self.streams, id)?;
        let root_at = index_of(&self.roots, self.streams[at].1 .0)?;
        Some((&mut self.roots[root_at].1, &mut self.streams[at].1 .1))
    }

    /// Forget context `id`: a stream, else a root (an unknown id changes nothing).
    pub fn delete(&mut self, id: u32) {
        if let Some(at) = index_of(&self.streams, id) {
            self.streams.swap_remove(at);
        } else if let Some(at) = index_of(&self.roots, id) {
            self.roots.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Roots are names; a stream is its root's name and a count of the callbacks it got.
    fn contexts() -> Contexts<String, (String, u32)> {
        Contexts::new()
    }

    fn create(c: &mut Contexts<String, (String, u32)>, id: u32, root: u32) {
        c.create(id, root, || format!("root-{id}"), |r| (r.clone(), 0));
    }

    #[test]
    fn each_callback_reaches_the_context_of_its_id() {
        let mut c = contexts();
        create(&mut c, 1, 0);
        create(&mut c, 2, 0);
        create(&mut c, 10, 1);
        create(&mut c, 11, 2);
        create(&mut c, 12, 1);
        assert_eq!(c.root(2).map(|r| r.as_str()), Some("root-2"));
        for id in [10, 12, 12, 11] {
            c.stream(id).unwrap().1 .1 += 1;
        }
        let seen = |c: &mut Contexts<String, (String, u32)>, id| c.stream(id).map(|(r, s)| (r.clone(), s.clone()));
        assert_eq!(seen(&mut c, 10), Some(("root-1".to_string(), ("root-1".to_string(), 1))));
        assert_eq!(seen(&mut c, 11), Some(("root-2".to_string(), ("root-2".to_string(), 1))));
        assert_eq!(seen(&mut c, 12), Some(("root-1".to_string(), ("root-1".to_string(), 2))));
        assert!(c.stream(1).is_none() && c.root(10).is_none(), "roots and streams are apart");
    }

    #[test]
    fn a_stream_of_an_unknown_root_is_not_made() {
        let mut c = contexts();
        create(&mut c, 5, 9);
        assert!(c.stream(5).is_none());
        create(&mut c, 9, 0);
        create(&mut c, 5, 9);
        assert_eq!(c.stream(5).map(|(_, s)| s.0.clone()), Some("root-9".to_string()));
    }

    #[test]
    fn delete_forgets_one_context_and_ids_come_back_new() {
        let mut c = contexts();
        create(&mut c, 1, 0);
        for id in 10..14 {
            create(&mut c, id, 1);
        }
        c.stream(11).unwrap().1 .1 = 7;
        c.delete(11);
        assert!(c.stream(11).is_none());
        assert!((10..14).filter(|id| *id != 11).all(|id| c.stream(id).is_some()), "the others stay");
        create(&mut c, 11, 1);
        assert_eq!(c.stream(11).map(|(_, s)| s.1), Some(0), "a reused id is a new stream");
        c.delete(99);
        c.delete(1);
        assert!(c.root(1).is_none());
        assert!(c.stream(10).is_none(), "a stream whose root is gone gets no callbacks");
    }
}
