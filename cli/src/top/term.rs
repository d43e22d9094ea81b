//! The interactive loop: a thread polls the status every interval and sends each result; the
//! main thread draws and reads keys. The terminal is restored on exit and on panic
//! (`ratatui::try_init` installs a panic hook that restores it first).

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use super::fetch::Fetcher;
use super::status::Status;
use super::ui::{self, App};

/// Runs until q, Esc or Ctrl-C. `only` keeps one limit.
pub fn run(fetcher: Fetcher, interval: Duration, only: Option<String>) -> std::io::Result<()> {
    let mut app = App {
        url: fetcher.url.clone(),
        interval: format!("{}s", interval.as_secs_f64()),
        ..App::default()
    };
    let (tx, rx) = mpsc::channel::<Result<Status, String>>();
    thread::spawn(move || loop {
        let r = fetcher.fetch().map(|mut s| {
            if let Some(n) = &only {
                s.limits.retain(|l| &l.name == n);
            }
            s
        });
        if tx.send(r).is_err() {
            return;
        }
        thread::sleep(interval);
    });
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            return Err(e);
        }
    };
    let result = (|| loop {
        while let Ok(r) = rx.try_recv() {
            match r {
                Ok(s) => {
                    app.status = Some(s);
                    app.error = None;
                    app.select(0);
                }
                Err(e) => app.error = Some(e),
            }
        }
        terminal.draw(|f| ui::draw(f, &app))?;
        if event::poll(Duration::from_millis(100))? {
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                        return Ok(())
                    }
                    KeyCode::Up | KeyCode::Left | KeyCode::Char('k') => app.select(-1),
                    KeyCode::Down | KeyCode::Right | KeyCode::Char('j') => app.select(1),
                    _ => {}
                }
            }
        }
    })();
    ratatui::restore();
    result
}
