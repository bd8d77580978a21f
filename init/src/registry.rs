//! Every app of this boot as PID 1 tracks it: its status for `status` and the reaper, and the
//! mount points made for apps. The hub holds one; the app launcher ([`crate::apps`]) fills it.

use std::sync::Mutex;

use berm_vm_protocol::{APP_UID_BASE, AppExited, AppState, AppStatus, Event};

use crate::lock::lock;

/// One app as PID 1 tracks it.
#[derive(Clone, Debug)]
struct Tracked {
    status: AppStatus,
}

/// Every app of this boot, for `status` and the reaper.
#[derive(Default)]
pub struct Registry {
    apps: Mutex<Vec<Tracked>>,
    mounts: Mutex<Vec<String>>,
}

impl Registry {
    /// The apps as `status` lists them.
    pub fn statuses(&self) -> Vec<AppStatus> {
        lock(&self.apps).iter().map(|t| t.status.clone()).collect()
    }

    /// Mount points made for apps, in the order they were made.
    pub fn mounts(&self) -> Vec<String> {
        lock(&self.mounts).clone()
    }

    fn update(&self, index: u32, change: impl FnOnce(&mut AppStatus)) {
        if let Some(t) = lock(&self.apps)
            .iter_mut()
            .find(|t| t.status.index == index)
        {
            change(&mut t.status);
        }
    }

    /// A reaped process: if it was an app's, mark it exited and return the event that says
    /// so (none for any other process, or an app already exited).
    pub fn exited(&self, pid: u32, code: Option<i32>, signal: Option<i32>) -> Option<Event> {
        let mut apps = lock(&self.apps);
        let t = apps
            .iter_mut()
            .find(|t| t.status.pid == Some(pid) && t.status.state != AppState::Exited)?;
        t.status.state = AppState::Exited;
        Some(Event::AppExited(AppExited {
            app: t.status.app.clone(),
            index: t.status.index,
            pid,
            code,
            signal,
        }))
    }

    /// Records a mount point made for apps (unmounted in reverse at power-off).
    pub fn add_mount(&self, path: String) {
        lock(&self.mounts).push(path);
    }

    /// Tracks app `index`, named `app`, as refused before it had a process.
    pub fn push_refused(&self, app: &str, index: u32) {
        self.track(AppStatus {
            app: app.into(),
            index,
            uid: APP_UID_BASE + index,
            pid: None,
            state: AppState::Refused,
            cgroup: String::new(),
            limits: None,
        });
    }

    /// Tracks `status` in place of what app `status.index` had, keeping index order.
    pub fn track(&self, status: AppStatus) {
        let mut apps = lock(&self.apps);
        apps.retain(|t| t.status.index != status.index);
        apps.push(Tracked { status });
        apps.sort_by_key(|t| t.status.index);
    }

    /// bermd said it is ready: a starting app becomes ready (one that already exited stays so).
    pub fn mark_ready(&self, index: u32) {
        self.update(index, |s| {
            if s.state == AppState::Starting {
                s.state = AppState::Ready;
            }
        });
    }
}
