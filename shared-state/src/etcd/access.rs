//! Least privilege on etcd: the key ranges each role may read or write ([`grants`], pure), and
//! [`Etcd::provision`], which creates the roles and users and enables auth.
//!
//! Every range is a prefix of the key layout (`/PREFIX/kv/NAME/`, `/PREFIX/log/`):
//!
//! | role | read | read and write |
//! |---|---|---|
//! | supervisor | everything under `/PREFIX/` | `kv/S/` for each supervisor store `S` (default `results`, `budget`, `runs`, `intents`, `fence`), `log/` |
//! | worker `W` | `kv/R/` for each store `R` its tasks read (default `results`), `kv/book/` (every worker's action books: a takeover imports the lost worker's), `kv/fence/` (the attempt that owns each task) | `kv/book/W/` (its action books), `kv/claims/W/` (its claims and its lease), `kv/world/` (the scripted tools' world: it stands for the external systems the tools act on, whose own permissions are outside quorate) |
//! | peer `P` | everything under `/PREFIX/kv/` (other peers' action books among them: a takeover imports the lost peer's) | `kv/S/` for each store `S` of [`PEER_STORES`] (the run's roster, claims, terminal records, root account, plan version and results: no supervisor, so peers commit them themselves, each by CAS; a claim is tied to its peer by the peer's etcd lease, not by its key; the scripted tools' world and the task fences, shared as a worker's world is and fenced by CAS), `kv/book/P/` (its own action books) |

use super::{failed, Etcd, Secret};
use crate::StoreError;

use etcd_client::Permission;

/// The stores a supervisor writes by default.
pub const SUPERVISOR_STORES: [&str; 5] = ["results", "budget", "runs", "intents", "fence"];
/// The stores every peer process writes (`quorate peer`, docs/distributed.md "Peer
/// processes"): the run's shared records, the scripted tools' world (`world/<run>/...`) and the
/// fences of its tasks (`fence/<run>/<task>`, CAS only). Its action books it writes only under
/// its own prefix (`book/<peer>/`, [`grants`]).
pub const PEER_STORES: [&str; 8] = [
    "peer-roster",
    "peer-claims",
    "peer-states",
    "peer-budget",
    "peer-plans",
    "results",
    "world",
    "fence",
];
/// The stores a worker reads by default.
pub const WORKER_READS: [&str; 3] = ["results", "book", "fence"];
/// The stores every worker writes: the scripted tools' world (the external systems the tools act
/// on; their own permissions are outside quorate).
pub const WORKER_SHARED_WRITES: [&str; 1] = ["world"];

/// What an etcd user is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdRole {
    /// The run's owner.
    Supervisor,
    /// Worker `name`: writes only its own books and claims (and the tools' world).
    Worker(String),
    /// Peer `name` (its agent id, as its action books' prefix names it): writes the run's
    /// shared records and only its own books.
    Peer(String),
}

impl EtcdRole {
    /// The etcd role's name: `quorate-supervisor`, `quorate-worker-W`, `quorate-peer-P`.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            EtcdRole::Supervisor => "quorate-supervisor".into(),
            EtcdRole::Worker(w) => format!("quorate-worker-{w}"),
            EtcdRole::Peer(p) => format!("quorate-peer-{p}"),
        }
    }
}

/// One permission: a key prefix, and whether the role may also write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The key prefix (ends in `/`).
    pub prefix: String,
    /// Read and write (else read only).
    pub write: bool,
}

/// The grants of `role` under `root` (`/PREFIX`, [`EtcdUrl::root`](crate::EtcdUrl::root)), with
/// the default store names (the module's table).
#[must_use]
pub fn grants(root: &str, role: &EtcdRole) -> Vec<Grant> {
    let read = |prefix: String| Grant {
        prefix,
        write: false,
    };
    let write = |prefix: String| Grant {
        prefix,
        write: true,
    };
    match role {
        EtcdRole::Supervisor => {
            let mut g = vec![read(format!("{root}/"))];
            g.extend(
                SUPERVISOR_STORES
                    .iter()
                    .map(|s| write(format!("{root}/kv/{s}/"))),
            );
            g.push(write(format!("{root}/log/")));
            g
        }
        EtcdRole::Worker(w) => {
            let mut g: Vec<Grant> = WORKER_READS
                .iter()
                .map(|s| read(format!("{root}/kv/{s}/")))
                .collect();
            g.push(write(format!("{root}/kv/book/{w}/")));
            g.push(write(format!("{root}/kv/claims/{w}/")));
            g.extend(
                WORKER_SHARED_WRITES
                    .iter()
                    .map(|s| write(format!("{root}/kv/{s}/"))),
            );
            g
        }
        EtcdRole::Peer(p) => {
            let mut g = vec![read(format!("{root}/kv/"))];
            g.extend(PEER_STORES.iter().map(|s| write(format!("{root}/kv/{s}/"))));
            g.push(write(format!("{root}/kv/book/{p}/")));
            g
        }
    }
}

/// One etcd user to create: its name, password and role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdAccount {
    /// The user name.
    pub user: String,
    /// Its password (`Debug` redacts it).
    pub password: Secret,
    /// Its role.
    pub role: EtcdRole,
}

impl Etcd {
    /// Creates the user `root` (with `root_password` and etcd's `root` role), one role per
    /// account with its [`grants`] under this connection's root, one user per account, and
    /// enables auth. Run it once, as an unauthenticated client of a cluster that has no auth
    /// yet (over TLS); afterwards every client needs a user.
    ///
    /// # Errors
    /// [`StoreError::Denied`] or [`StoreError::Unavailable`] as etcd answered (an existing user or
    /// role is an error: provisioning is not idempotent).
    pub async fn provision(
        &self,
        root_password: &Secret,
        accounts: &[EtcdAccount],
    ) -> Result<(), StoreError> {
        let mut auth = self.shared.auth.clone();
        let root = self.shared.root.clone();
        let root_password = root_password.expose().to_string();
        let accounts = accounts.to_vec();
        let task = async move {
            auth.user_add("root", root_password, None).await?;
            auth.user_grant_role("root", "root").await?;
            for account in &accounts {
                let role = account.role.name();
                auth.role_add(role.clone()).await?;
                for g in grants(&root, &account.role) {
                    let perm = if g.write {
                        Permission::read_write(g.prefix)
                    } else {
                        Permission::read(g.prefix)
                    }
                    .with_prefix();
                    auth.role_grant_permission(role.clone(), perm).await?;
                }
                auth.user_add(account.user.clone(), account.password.expose(), None)
                    .await?;
                auth.user_grant_role(account.user.clone(), role).await?;
            }
            auth.auth_enable().await?;
            Ok::<(), etcd_client::Error>(())
        };
        self.shared
            .handle
            .spawn(task)
            .await
            .map_err(|e| self.unavailable(e))?
            .map_err(|e| failed(&self.shared.url, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_writes_only_its_own_book_and_claims() {
        let g = grants("/q", &EtcdRole::Worker("a".into()));
        let written: Vec<&str> = g
            .iter()
            .filter(|g| g.write)
            .map(|g| g.prefix.as_str())
            .collect();
        assert_eq!(
            written,
            ["/q/kv/book/a/", "/q/kv/claims/a/", "/q/kv/world/"]
        );
        let read: Vec<&str> = g
            .iter()
            .filter(|g| !g.write)
            .map(|g| g.prefix.as_str())
            .collect();
        assert_eq!(read, ["/q/kv/results/", "/q/kv/book/", "/q/kv/fence/"]);
        assert!(g.iter().all(|g| g.prefix.ends_with('/')));
        let sup = grants("/q", &EtcdRole::Supervisor);
        assert!(sup.iter().any(|g| g.write && g.prefix == "/q/kv/results/"));
        assert!(sup.iter().any(|g| g.write && g.prefix == "/q/log/"));
        assert!(!sup.iter().any(|g| g.write && g.prefix.contains("/book/")));
        assert!(sup.iter().any(|g| g.write && g.prefix == "/q/kv/fence/"));
        assert_eq!(EtcdRole::Worker("a".into()).name(), "quorate-worker-a");
    }

    #[test]
    fn a_peer_writes_the_shared_stores_and_its_own_books_only() {
        let g = grants("/q", &EtcdRole::Peer("p".into()));
        let written: Vec<&str> = g
            .iter()
            .filter(|g| g.write)
            .map(|g| g.prefix.as_str())
            .collect();
        assert_eq!(
            written,
            [
                "/q/kv/peer-roster/",
                "/q/kv/peer-claims/",
                "/q/kv/peer-states/",
                "/q/kv/peer-budget/",
                "/q/kv/peer-plans/",
                "/q/kv/results/",
                "/q/kv/world/",
                "/q/kv/fence/",
                "/q/kv/book/p/"
            ]
        );
        // Nothing of a supervisor's run record, log or budget, nor another's books.
        for other in ["runs", "intents", "book", "budget", "claims", "book/q"] {
            let key = format!("/q/kv/{other}/x");
            assert!(
                !g.iter().any(|g| g.write && key.starts_with(&g.prefix)),
                "{other}"
            );
        }
        assert!(!g.iter().any(|g| g.prefix.starts_with("/q/log/")));
        assert_eq!(EtcdRole::Peer("p".into()).name(), "quorate-peer-p");
    }
}
