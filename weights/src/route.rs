//! Where a reporter's endpoints are in a cluster's list, so that its next report finds them without
//! a hash lookup per endpoint.

use std::collections::HashMap;

/// Where one cluster's endpoints of a reporter's last report are in the cluster's list, with their
/// addresses back to back in report order. The next report naming the same endpoints in the same
/// order (the usual case) finds them by comparing bytes in this one buffer instead of hashing each
/// address and chasing the index, a key and the endpoint through memory. Valid while the
/// cluster's `layout` is the one recorded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Route {
    pub layout: u64,
    pub index: Vec<u32>,
    addresses: Vec<u8>,
    /// `addresses[ends[i - 1]..ends[i]]` is the i-th address.
    ends: Vec<u32>,
}

impl Route {
    /// The list index of the i-th endpoint of the report if the route says `address` is there.
    pub fn lookup(&self, layout: u64, i: usize, address: &str) -> Option<usize> {
        if self.layout != layout {
            return None;
        }
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        (self.addresses.get(start..end) == Some(address.as_bytes())).then(|| self.index[i] as usize)
    }

    /// The route of `addresses` through a cluster's list as `index` (address to position) has it.
    pub fn rebuild<'a>(
        &mut self,
        layout: u64,
        index: &HashMap<String, usize>,
        addresses: impl Iterator<Item = &'a str>,
    ) {
        self.layout = layout;
        self.index.clear();
        self.addresses.clear();
        self.ends.clear();
        for a in addresses {
            let Some(&i) = index.get(a) else {
                // Cannot happen (ingest inserted them all); an empty route only costs a slow lookup.
                self.layout = 0;
                return;
            };
            self.index.push(i as u32);
            self.addresses.extend_from_slice(a.as_bytes());
            self.ends.push(self.addresses.len() as u32);
        }
    }
}
