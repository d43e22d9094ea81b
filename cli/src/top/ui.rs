//! Drawing `weir top`: a table of limits (the selected one highlighted) and the selected
//! limit's panel — its rates, sparklines of rejected/s and passed/s, top keys and clients, and
//! its bans when the status reports them. Pure rendering into a ratatui frame (tests draw into
//! `TestBackend`).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;

use super::snapshot::{ban_left, known, limit_view, rate, LimitView};
use super::status::{Limit, Status};

/// What the screen shows: the last status fetched, the last error, the selected limit.
#[derive(Default)]
pub struct App {
    pub url: String,
    pub interval: String,
    pub status: Option<Status>,
    pub error: Option<String>,
    pub selected: usize,
}

impl App {
    /// Limits in the status (after `--limit`).
    pub fn limits(&self) -> &[Limit] {
        self.status.as_ref().map_or(&[], |s| &s.limits)
    }

    /// Moves the selection by `d`, wrapping around.
    pub fn select(&mut self, d: isize) {
        let n = self.limits().len() as isize;
        if n > 0 {
            self.selected = (self.selected as isize + d).rem_euclid(n) as usize;
        }
    }
}

/// Draws the whole screen.
pub fn draw(f: &mut Frame, app: &App) {
    let limits = app.limits();
    let table_h = (limits.len() as u16 + 3).min(12);
    let [head, table, panel] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(table_h),
        Constraint::Min(0),
    ])
    .areas(f.area());
    f.render_widget(header(app), head);
    let views: Vec<LimitView> = limits.iter().map(limit_view).collect();
    f.render_widget(limits_table(&views, app.selected), table);
    if let (Some(l), Some(v)) = (limits.get(app.selected), views.get(app.selected)) {
        limit_panel(f, panel, l, v);
    } else {
        let msg = if app.status.is_some() {
            "no limits"
        } else {
            "waiting for the status…"
        };
        f.render_widget(Paragraph::new(msg).block(Block::bordered()), panel);
    }
}

fn header(app: &App) -> Paragraph<'static> {
    let mut spans = vec![
        Span::styled("weir top ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("{} every {}  ", app.url, app.interval)),
    ];
    match &app.error {
        Some(e) => spans.push(Span::styled(
            crate::escape::line(e).into_owned(),
            Style::new().fg(Color::Red),
        )),
        None => spans.push(Span::styled(
            "↑/↓ select, q quit",
            Style::new().fg(Color::DarkGray),
        )),
    }
    Paragraph::new(Line::from(spans))
}

fn limits_table(views: &[LimitView], selected: usize) -> Table<'static> {
    let rows = views.iter().enumerate().map(|(i, v)| {
        let style = if i == selected {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        let rej = Style::new().fg(if v.last_1m.rejected_per_s > 0.0 {
            Color::Red
        } else {
            Color::Reset
        });
        Row::new(vec![
            Cell::from(v.name.clone()),
            Cell::from(rate(v.last_1m.passed_per_s)),
            Cell::from(rate(Some(v.last_1m.rejected_per_s))).style(rej),
            Cell::from(rate(v.last_15m.passed_per_s)),
            Cell::from(rate(Some(v.last_15m.rejected_per_s))),
            Cell::from(v.total.rejected.to_string()),
        ])
        .style(style)
    });
    let head = Row::new([
        "limit",
        "pass 1m",
        "reject 1m",
        "pass 15m",
        "reject 15m",
        "rejected",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    Table::new(
        rows,
        [
            Constraint::Fill(1),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
    )
    .header(head)
    .block(Block::bordered().title(" limits "))
}

/// The last `n` entries of a per-second series.
fn tail(v: &[Option<u64>], n: usize) -> &[Option<u64>] {
    &v[v.len().saturating_sub(n)..]
}

fn sparkline<'a>(title: &str, data: &'a [Option<u64>], color: Color) -> Sparkline<'a> {
    let max = data.iter().flatten().max().copied().unwrap_or(0);
    let secs = data.len();
    Sparkline::default()
        .block(Block::new().borders(Borders::TOP).title(format!(
            " {title}, last {}:{:02} (max {max}) ",
            secs / 60,
            secs % 60
        )))
        .data(data)
        .style(Style::new().fg(color))
}

fn limit_panel(f: &mut Frame, area: Rect, l: &Limit, v: &LimitView) {
    let block = Block::bordered().title(Span::styled(
        format!(" limit {} ", v.name),
        Style::new().add_modifier(Modifier::BOLD),
    ));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let [rates, rejected, passed, tables] = Layout::vertical([
        Constraint::Length(2 + u16::from(v.capacity.is_some())),
        Constraint::Length(6),
        Constraint::Length(4),
        Constraint::Min(0),
    ])
    .areas(inner);
    let lines: Vec<Line> = [&v.last_1m, &v.last_15m]
        .iter()
        .map(|w| {
            Line::from(format!(
                "last {:>2}m: passed {:>8}  delayed {:>8}  rejected {:>8}{}",
                w.seconds / 60,
                rate(w.passed_per_s),
                rate(Some(w.delayed_per_s)),
                rate(Some(w.rejected_per_s)),
                known(w),
            ))
        })
        .chain(v.capacity.iter().map(|c| Line::from(c.line())))
        .collect();
    f.render_widget(Paragraph::new(lines), rates);
    if let Some(per) = &l.per_second {
        let n = inner.width as usize;
        let rej = tail(&per.rejected, n);
        let pass = tail(&per.passed, n);
        f.render_widget(sparkline("rejected/s", rej, Color::Red), rejected);
        f.render_widget(sparkline("passed/s", pass, Color::Green), passed);
    }
    let has_bans = v.bans.is_some();
    let cols: &[Constraint] = if has_bans {
        &[Constraint::Ratio(1, 3); 3]
    } else {
        &[Constraint::Ratio(1, 2); 2]
    };
    let areas = Layout::horizontal(cols).split(tables);
    let w = &v.last_1m;
    let keys = w.keys.iter().map(|k| (k.rejected, k.key.clone()));
    f.render_widget(
        count_table(" top keys, last 1m (rejected) ", keys),
        areas[0],
    );
    let clients = w.clients.iter().map(|c| (c.rejected, c.client.clone()));
    f.render_widget(
        count_table(" top clients, last 1m (rejected) ", clients),
        areas[1],
    );
    if let Some(bans) = &v.bans {
        let rows = bans
            .iter()
            .map(|b| Row::new(vec![ban_left(b), b.key.clone()]));
        let t = Table::new(rows, [Constraint::Length(10), Constraint::Fill(1)])
            .block(Block::bordered().title(format!(" bans ({}) ", bans.len())));
        f.render_widget(t, areas[2]);
    }
}

fn count_table(title: &'static str, rows: impl Iterator<Item = (u64, String)>) -> Table<'static> {
    let rows = rows.map(|(n, name)| Row::new(vec![n.to_string(), name]));
    Table::new(rows, [Constraint::Length(8), Constraint::Fill(1)])
        .block(Block::bordered().title(title))
}
