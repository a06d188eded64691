//! An Elle-style checker of list-append histories (Kingsbury and Alvaro, "Elle: Inferring
//! Isolation Anomalies from Experimental Observations", VLDB 2020): every key holds a list,
//! every write appends an element unique in the whole history, and every read returns a key's
//! whole list, so the reads say each key's version order (the longest list read; every other read
//! must be a prefix of it). From that order come the dependencies between transactions: a
//! write-write edge from the writer of each element to the writer of the next, a write-read edge
//! from the writer of a read's last element to the reader, and a read-write (anti-)dependency
//! from a reader to the writer of the element after what it read. A serializable history has no
//! cycle; a cycle is named by Adya's phenomena: G0 (write-write edges only), G1c (write-write and
//! write-read), G-single (exactly one read-write edge), G2 (more). Besides cycles: G1a (a read of
//! an element whose write failed), reads that are not prefixes of one order, duplicates, elements
//! nobody wrote, and committed appends missing from the final read (lost).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// A key: `<table>/<partition>/<row>`.
pub(crate) type Key = String;
/// An appended element, unique in a history.
pub(crate) type Element = u64;

/// How a transaction ended, as its client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Acknowledged.
    Committed,
    /// Refused: nothing of it may be seen.
    Failed,
    /// No answer (a broken connection, a server killed, a timeout): it may have committed.
    Unknown,
}

/// One transaction of a history: what it read (each key's whole list) and appended.
#[derive(Clone, Debug)]
pub(crate) struct Transaction {
    pub(crate) outcome: Outcome,
    pub(crate) reads: Vec<(Key, Vec<Element>)>,
    pub(crate) appends: Vec<(Key, Element)>,
}

impl Transaction {
    /// A read that was answered (reads are never in doubt).
    pub(crate) fn read(reads: Vec<(Key, Vec<Element>)>) -> Transaction {
        Transaction {
            outcome: Outcome::Committed,
            reads,
            appends: Vec::new(),
        }
    }
}

/// What the checker found wrong; the cycles name the transactions by their place in the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Anomaly {
    G0(Vec<usize>),
    G1a { reader: usize, element: Element },
    G1c(Vec<usize>),
    GSingle(Vec<usize>),
    G2(Vec<usize>),
    IncompatibleOrder { key: Key },
    Duplicate { key: Key },
    Garbage { key: Key, element: Element },
    Lost { key: Key, element: Element },
}

impl Anomaly {
    /// The phenomenon's name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Anomaly::G0(_) => "G0",
            Anomaly::G1a { .. } => "G1a",
            Anomaly::G1c(_) => "G1c",
            Anomaly::GSingle(_) => "G-single",
            Anomaly::G2(_) => "G2",
            Anomaly::IncompatibleOrder { .. } => "incompatible-order",
            Anomaly::Duplicate { .. } => "duplicate-elements",
            Anomaly::Garbage { .. } => "garbage-read",
            Anomaly::Lost { .. } => "lost-append",
        }
    }
}

const WW: u8 = 1;
const WR: u8 = 2;
const RW: u8 = 4;

/// The dependency graph: edges by kind bits, from each transaction.
#[derive(Default)]
struct Graph {
    edges: HashMap<usize, HashMap<usize, u8>>,
}

impl Graph {
    fn add(&mut self, from: usize, to: usize, kind: u8) {
        if from != to {
            *self.edges.entry(from).or_default().entry(to).or_default() |= kind;
        }
    }

    fn next(&self, from: usize, mask: u8) -> impl Iterator<Item = usize> + '_ {
        self.edges
            .get(&from)
            .into_iter()
            .flatten()
            .filter(move |(_, kind)| **kind & mask != 0)
            .map(|(to, _)| *to)
    }

    /// The strongly connected components of more than one transaction, over edges of `mask`
    /// (Kosaraju's, iteratively).
    fn cycles(&self, mask: u8) -> Vec<Vec<usize>> {
        let mut nodes: Vec<usize> = self.edges.keys().copied().collect();
        nodes.sort_unstable();
        let mut order = Vec::new();
        let mut seen = HashSet::new();
        for &start in &nodes {
            if !seen.insert(start) {
                continue;
            }
            let mut stack = vec![(start, self.next(start, mask).collect::<Vec<_>>())];
            while let Some((node, pending)) = stack.last_mut() {
                match pending.pop() {
                    Some(to) if seen.insert(to) => {
                        let further = self.next(to, mask).collect();
                        stack.push((to, further));
                    }
                    Some(_) => {}
                    None => {
                        order.push(*node);
                        stack.pop();
                    }
                }
            }
        }
        let mut reverse: HashMap<usize, Vec<usize>> = HashMap::new();
        for (&from, tos) in &self.edges {
            for (&to, &kind) in tos {
                if kind & mask != 0 {
                    reverse.entry(to).or_default().push(from);
                }
            }
        }
        let mut placed = HashSet::new();
        let mut components = Vec::new();
        for &start in order.iter().rev() {
            if !placed.insert(start) {
                continue;
            }
            let (mut component, mut stack) = (vec![start], vec![start]);
            while let Some(node) = stack.pop() {
                for &from in reverse.get(&node).into_iter().flatten() {
                    if placed.insert(from) {
                        component.push(from);
                        stack.push(from);
                    }
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                components.push(component);
            }
        }
        components
    }

    /// A path from `from` to `to` over edges of `mask` (breadth first), both ends included.
    fn path(&self, from: usize, to: usize, mask: u8) -> Option<Vec<usize>> {
        let mut came_from = HashMap::from([(from, from)]);
        let mut queue = VecDeque::from([from]);
        while let Some(node) = queue.pop_front() {
            if node == to {
                let mut path = vec![to];
                let mut at = to;
                while at != from {
                    at = came_from[&at];
                    path.push(at);
                }
                path.reverse();
                return Some(path);
            }
            for next in self.next(node, mask) {
                if let std::collections::hash_map::Entry::Vacant(entry) = came_from.entry(next) {
                    entry.insert(node);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// One cycle through `component` over edges of `mask`.
    fn cycle_in(&self, component: &[usize], mask: u8) -> Vec<usize> {
        let start = component[0];
        self.next(start, mask)
            .filter(|next| component.contains(next))
            .find_map(|next| self.path(next, start, mask))
            .map(|mut path| {
                path.insert(0, start);
                path
            })
            .unwrap_or_else(|| component.to_vec())
    }
}

/// Checks `history`, whose last reads are `final_reads` (each key's list once every client has
/// stopped): every anomaly found, at most one cycle of each kind.
pub(crate) fn check(
    history: &[Transaction],
    final_reads: &BTreeMap<Key, Vec<Element>>,
) -> Vec<Anomaly> {
    let mut history = history.to_vec();
    history.push(Transaction::read(
        final_reads
            .iter()
            .map(|(key, list)| (key.clone(), list.clone()))
            .collect(),
    ));
    let final_read = history.len() - 1;
    let mut anomalies = Vec::new();
    let mut writer: HashMap<Element, (usize, &Key)> = HashMap::new();
    for (at, transaction) in history.iter().enumerate() {
        for (key, element) in &transaction.appends {
            writer.insert(*element, (at, key));
        }
    }
    // The elements some read saw: an unknown write seen has committed.
    let seen: HashSet<Element> = history
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .flat_map(|t| t.reads.iter().flat_map(|(_, list)| list.iter().copied()))
        .collect();
    let counts = |t: &Transaction| match t.outcome {
        Outcome::Committed => true,
        Outcome::Failed => false,
        Outcome::Unknown => t.appends.iter().any(|(_, element)| seen.contains(element)),
    };
    let mut reads_of: BTreeMap<&Key, Vec<(usize, &Vec<Element>)>> = BTreeMap::new();
    for (at, transaction) in history.iter().enumerate() {
        if counts(transaction) {
            for (key, list) in &transaction.reads {
                reads_of.entry(key).or_default().push((at, list));
            }
        }
    }
    let mut graph = Graph::default();
    for (key, reads) in &reads_of {
        let Some(order) = version_order(key, reads, &mut anomalies) else {
            continue;
        };
        for element in order {
            match writer.get(element) {
                None => anomalies.push(Anomaly::Garbage {
                    key: (*key).clone(),
                    element: *element,
                }),
                Some((_, written)) if written != key => anomalies.push(Anomaly::Garbage {
                    key: (*key).clone(),
                    element: *element,
                }),
                Some((at, _)) if history[*at].outcome == Outcome::Failed => {
                    let reader = reads
                        .iter()
                        .find(|(_, list)| list.contains(element))
                        .map_or(final_read, |(reader, _)| *reader);
                    anomalies.push(Anomaly::G1a {
                        reader,
                        element: *element,
                    });
                }
                Some(_) => {}
            }
        }
        let writer_of = |element: &Element| writer.get(element).map(|(at, _)| *at);
        for pair in order.windows(2) {
            if let (Some(from), Some(to)) = (writer_of(&pair[0]), writer_of(&pair[1])) {
                graph.add(from, to, WW);
            }
        }
        for (reader, list) in reads {
            if let Some(from) = list.last().and_then(writer_of) {
                graph.add(from, *reader, WR);
            }
            if let Some(to) = order.get(list.len()).and_then(writer_of) {
                graph.add(*reader, to, RW);
            }
        }
    }
    for transaction in history.iter().filter(|t| t.outcome == Outcome::Committed) {
        for (key, element) in &transaction.appends {
            let kept = final_reads
                .get(key)
                .is_some_and(|list| list.contains(element));
            if !kept {
                anomalies.push(Anomaly::Lost {
                    key: key.clone(),
                    element: *element,
                });
            }
        }
    }
    anomalies.extend(cycles(&graph));
    anomalies
}

/// The version order of `key` by its `reads` (the longest), if every read is a prefix of it and
/// none repeats an element; otherwise the anomaly is noted and the key gives no edges.
fn version_order<'a>(
    key: &Key,
    reads: &[(usize, &'a Vec<Element>)],
    anomalies: &mut Vec<Anomaly>,
) -> Option<&'a Vec<Element>> {
    let longest = reads
        .iter()
        .map(|(_, list)| *list)
        .max_by_key(|l| l.len())?;
    if longest.iter().collect::<HashSet<_>>().len() != longest.len() {
        anomalies.push(Anomaly::Duplicate { key: key.clone() });
        return None;
    }
    if reads.iter().any(|(_, list)| !longest.starts_with(list)) {
        anomalies.push(Anomaly::IncompatibleOrder { key: key.clone() });
        return None;
    }
    Some(longest)
}

/// The cycles of `graph`, one of each kind: G0, G1c, G-single and G2, each only where no
/// stronger one explains the same component.
fn cycles(graph: &Graph) -> Vec<Anomaly> {
    let mut found = Vec::new();
    if let Some(component) = graph.cycles(WW).first() {
        found.push(Anomaly::G0(graph.cycle_in(component, WW)));
    }
    if let Some(component) = graph.cycles(WW | WR).first() {
        if found.is_empty() {
            found.push(Anomaly::G1c(graph.cycle_in(component, WW | WR)));
        }
    }
    let components = graph.cycles(WW | WR | RW);
    let mut single = None;
    'components: for component in &components {
        let members: HashSet<usize> = component.iter().copied().collect();
        for &from in component {
            for to in graph.next(from, RW).filter(|to| members.contains(to)) {
                if let Some(back) = graph.path(to, from, WW | WR) {
                    let mut cycle = vec![from];
                    cycle.extend(back);
                    single = Some(cycle);
                    break 'components;
                }
            }
        }
    }
    match single {
        Some(cycle) if found.is_empty() => found.push(Anomaly::GSingle(cycle)),
        _ => {}
    }
    if found.is_empty() {
        if let Some(component) = components.first() {
            found.push(Anomaly::G2(graph.cycle_in(component, WW | WR | RW)));
        }
    }
    found
}

#[cfg(test)]
mod sanity {
    //! The checker on histories with a known anomaly, and on one with none: it must find each.
    use super::*;

    fn append(appends: &[(&str, Element)], reads: &[(&str, &[Element])]) -> Transaction {
        Transaction {
            outcome: Outcome::Committed,
            reads: reads
                .iter()
                .map(|(key, list)| (key.to_string(), list.to_vec()))
                .collect(),
            appends: appends.iter().map(|(k, e)| (k.to_string(), *e)).collect(),
        }
    }

    fn finals(lists: &[(&str, &[Element])]) -> BTreeMap<Key, Vec<Element>> {
        lists
            .iter()
            .map(|(key, list)| (key.to_string(), list.to_vec()))
            .collect()
    }

    fn names(anomalies: &[Anomaly]) -> Vec<&'static str> {
        anomalies.iter().map(Anomaly::name).collect()
    }

    #[test]
    fn a_serial_history_has_no_anomaly() {
        let history = [
            append(&[("x", 1)], &[("x", &[])]),
            append(&[("x", 2), ("y", 3)], &[("x", &[1]), ("y", &[])]),
            Transaction::read(vec![("x".into(), vec![1, 2]), ("y".into(), vec![3])]),
        ];
        let found = check(&history, &finals(&[("x", &[1, 2]), ("y", &[3])]));
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn writes_ordered_differently_on_two_keys_are_g0() {
        let history = [
            append(&[("x", 1), ("y", 2)], &[]),
            append(&[("x", 3), ("y", 4)], &[]),
        ];
        let found = check(&history, &finals(&[("x", &[1, 3]), ("y", &[4, 2])]));
        assert_eq!(names(&found), ["G0"], "{found:?}");
    }

    #[test]
    fn a_read_of_a_failed_write_is_g1a() {
        let mut failed = append(&[("x", 1)], &[]);
        failed.outcome = Outcome::Failed;
        let history = [failed, Transaction::read(vec![("x".into(), vec![1])])];
        let found = check(&history, &finals(&[("x", &[1])]));
        assert_eq!(names(&found), ["G1a"], "{found:?}");
    }

    #[test]
    fn each_reading_the_others_write_is_g1c() {
        let history = [
            append(&[("x", 1)], &[("y", &[2])]),
            append(&[("y", 2)], &[("x", &[1])]),
        ];
        let found = check(&history, &finals(&[("x", &[1]), ("y", &[2])]));
        assert_eq!(names(&found), ["G1c"], "{found:?}");
    }

    #[test]
    fn a_read_skew_is_g_single() {
        let history = [
            append(&[("x", 1), ("y", 2)], &[]),
            Transaction::read(vec![("x".into(), vec![]), ("y".into(), vec![2])]),
        ];
        let found = check(&history, &finals(&[("x", &[1]), ("y", &[2])]));
        assert_eq!(names(&found), ["G-single"], "{found:?}");
    }

    #[test]
    fn a_lost_update_is_g_single() {
        let history = [
            append(&[("x", 1)], &[("x", &[])]),
            append(&[("x", 2)], &[("x", &[])]),
        ];
        let found = check(&history, &finals(&[("x", &[1, 2])]));
        assert_eq!(names(&found), ["G-single"], "{found:?}");
    }

    #[test]
    fn a_write_skew_is_g2() {
        let history = [
            append(&[("x", 1)], &[("x", &[]), ("y", &[])]),
            append(&[("y", 2)], &[("x", &[]), ("y", &[])]),
        ];
        let found = check(&history, &finals(&[("x", &[1]), ("y", &[2])]));
        assert_eq!(names(&found), ["G2"], "{found:?}");
    }

    #[test]
    fn reads_of_diverging_orders_and_missing_appends_are_found() {
        let history = [
            append(&[("x", 1)], &[]),
            append(&[("x", 2)], &[]),
            Transaction::read(vec![("x".into(), vec![2])]),
            append(&[("y", 3)], &[]),
        ];
        let found = check(&history, &finals(&[("x", &[1, 2])]));
        assert_eq!(
            names(&found),
            ["incompatible-order", "lost-append"],
            "{found:?}"
        );
    }

    #[test]
    fn an_unknown_write_counts_only_once_seen() {
        let mut unknown = append(&[("x", 1)], &[("x", &[])]);
        unknown.outcome = Outcome::Unknown;
        let mut unseen = append(&[("y", 2)], &[("y", &[])]);
        unseen.outcome = Outcome::Unknown;
        let history = [unknown, unseen];
        let found = check(&history, &finals(&[("x", &[1]), ("y", &[])]));
        assert!(found.is_empty(), "{found:?}");
    }
}
