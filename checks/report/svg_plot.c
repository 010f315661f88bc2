/* Inline SVG line and bar charts (see svg_plot.h). */
#include "report/svg_plot.h"

#include "numerics/fmath.h"
#include "report/format.h"

#include <math.h>
#include <string.h>

enum {
  LEFT = 64,
  RIGHT = 16,
  TOP = 26,
  BOTTOM = 40,
  CATEGORY_SPACE = 70,
  LEGEND_ROW = 16,
  LEGEND_CHARS = 40,
  CATEGORY_CHARS = 22
};

static const char *const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

const char *dlc_plot_color(int i) {
  int n = (int)(sizeof palette / sizeof palette[0]);
  return palette[((i % n) + n) % n];
}

static const char *series_color(const dlc_plot_series *s, int i) {
  return s->color ? s->color : dlc_plot_color(i);
}

/* ---- numbers ---------------------------------------------------------------- */

static double log10_of(double v) { return dl_log(v) / dl_log(10.0); }

/* floor(log10(v)) for v > 0; a value a hair below a power of ten counts as
 * that power (only tick placement depends on it). */
static int decade(double v) { return (int)floor(log10_of(v) + 1e-9); }

/* 10^k by repeated multiplication or division: deterministic everywhere. */
static double pow10_of(int k) {
  double p = 1;
  for (int i = 0; i < k; i++) p *= 10;
  for (int i = 0; i > k; i--) p /= 10;
  return p;
}

/* 1, 2 or 5 times a power of ten, at least raw. */
static double nice_step(double raw) {
  int k = decade(raw);
  double p = pow10_of(k), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* ---- axes -------------------------------------------------------------------- */

typedef struct axis {
  bool log;
  double lo, hi;       /* data range; log10 of it on a log axis */
  double step;         /* linear tick spacing; log: decades between ticks */
  bool zero_line;      /* log: values <= 0 are drawn at lo, labelled "0" */
  double px_lo, px_hi; /* pixels of lo and hi */
} axis;

typedef struct extent {
  double min, max;       /* finite values */
  double minpos, maxpos; /* positive finite values */
  bool any, anypos, nonpos;
} extent;

static void extent_add(extent *e, double v) {
  if (!isfinite(v)) return;
  if (!e->any || v < e->min) e->min = v;
  if (!e->any || v > e->max) e->max = v;
  e->any = true;
  if (v <= 0) {
    e->nonpos = true;
    return;
  }
  if (!e->anypos || v < e->minpos) e->minpos = v;
  if (!e->anypos || v > e->maxpos) e->maxpos = v;
  e->anypos = true;
}

static void linear_axis(axis *a, double lo, double hi, double min_step) {
  if (lo > hi) lo = 0, hi = 1;
  if (lo < -1e300) lo = -1e300;
  if (hi > 1e300) hi = 1e300;
  /* a constant series (or one too flat to tell apart) gets a range around it */
  if (!(hi - lo > fmax(fabs(lo), fabs(hi)) * 1e-12)) {
    double d = lo == 0 ? 1 : fabs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  a->log = false;
  a->step = nice_step((hi - lo) / 5);
  if (a->step < min_step) a->step = min_step;
  a->lo = lo;
  a->hi = hi;
}

/* Extends a linear y range outwards to whole ticks. */
static void round_out(axis *a) {
  a->lo = floor(a->lo / a->step) * a->step;
  a->hi = ceil(a->hi / a->step) * a->step;
}

static void log_axis(axis *a, const extent *e) {
  int lo = 0, hi = 1;
  if (e->anypos) {
    lo = decade(e->minpos);
    hi = decade(e->maxpos);
    if (pow10_of(hi) < e->maxpos) hi++;
    if (hi == lo) hi++;
  }
  a->log = true;
  a->zero_line = e->nonpos || !e->anypos;
  a->lo = lo - (a->zero_line ? 1 : 0);
  a->hi = hi;
  a->step = (hi - lo + 7) / 8;
  if (a->step < 1) a->step = 1;
}

/* The pixel of v, false where it cannot be drawn (NaN, inf). */
static bool axis_pixel(const axis *a, double v, double *px) {
  if (!isfinite(v)) return false;
  double t;
  if (a->log) t = v > 0 ? (log10_of(v) - a->lo) / (a->hi - a->lo) : 0;
  else t = (v - a->lo) / (a->hi - a->lo);
  if (t < -1) t = -1; /* far outside only by rounding; keep numbers sane */
  if (t > 2) t = 2;
  *px = a->px_lo + t * (a->px_hi - a->px_lo);
  return true;
}

/* ---- text ------------------------------------------------------------------ */

/* s cut to at most max characters (an ellipsis marks the cut), escaped. */
static void put_text(FILE *f, const char *s, int max) {
  char buf[4 * 64 + 4];
  size_t len = 0;
  int chars = 0;
  if (max > 64) max = 64;
  while (s[len] && chars < max) {
    uint32_t cp;
    len += (size_t)dlc_utf8_next(s + len, &cp);
    chars++;
  }
  memcpy(buf, s, len);
  buf[len] = '\0';
  dlc_xml_text(f, buf, false);
  if (s[len]) fputs("\xe2\x80\xa6", f);
}

static int text_chars(const char *s, int max) {
  int n = 0;
  for (uint32_t cp; *s && n < max; n++) s += dlc_utf8_next(s, &cp);
  return n + (*s ? 1 : 0);
}

static void tick_label(char *buf, size_t len, const axis *a, double v) {
  if (a->log) {
    int k = (int)v;
    if (a->zero_line && v == a->lo) snprintf(buf, len, "0");
    else if (k >= -3 && k <= 3) snprintf(buf, len, "%g", pow10_of(k));
    else snprintf(buf, len, "1e%d", k);
    return;
  }
  if (fabs(v) < a->step * 1e-6) v = 0;
  double big = fmax(fmax(fabs(a->lo), fabs(a->hi)), a->step);
  int sig = decade(big) - decade(a->step) + 2;
  if (sig < 1) sig = 1;
  if (sig > 15) sig = 15;
  snprintf(buf, len, "%.*g", sig, v);
}

/* ---- frame ------------------------------------------------------------------ */

typedef struct frame {
  int width, height; /* the whole picture */
  int left, right, top, bottom;
  int legend_top;
} frame;

/* Legend entries flow in rows under the frame. */
static int legend_rows(const dlc_plot_series *s, int ns, int width) {
  int rows = ns ? 1 : 0, x = LEFT;
  for (int i = 0; i < ns; i++) {
    int w = 40 + 7 * text_chars(s[i].name ? s[i].name : "", LEGEND_CHARS);
    if (x + w > width && x > LEFT) rows++, x = LEFT;
    x += w;
  }
  return rows;
}

static frame make_frame(const dlc_plot *p, const dlc_plot_series *s, int ns, int extra_bottom) {
  frame fr = {.width = p->width > 0 ? p->width : 640};
  int h = p->height > 0 ? p->height : 260;
  fr.left = LEFT;
  fr.right = fr.width - RIGHT;
  fr.top = TOP;
  fr.bottom = h - BOTTOM - extra_bottom;
  if (fr.bottom < fr.top + 40) fr.bottom = fr.top + 40;
  fr.legend_top = fr.bottom + BOTTOM + extra_bottom - 8;
  fr.height = fr.legend_top + legend_rows(s, ns, fr.width) * LEGEND_ROW + 6;
  return fr;
}

static void open_svg(FILE *f, const frame *fr, const dlc_plot *p) {
  fprintf(f,
          "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
          "font-size=\"11\" role=\"img\">\n",
          fr->width, fr->height, fr->width, fr->height);
  fprintf(f, "<text x=\"%d\" y=\"16\" text-anchor=\"middle\" font-weight=\"bold\">", fr->width / 2);
  put_text(f, p->title ? p->title : "", 64);
  fputs("</text>\n", f);
}

static void y_ticks(FILE *f, const frame *fr, const axis *a) {
  double first = a->log ? a->lo : ceil(a->lo / a->step - 1e-9);
  double last = a->log ? a->hi : floor(a->hi / a->step + 1e-9);
  for (double i = first; i <= last + 1e-9; i += (a->log ? a->step : 1)) {
    double v = a->log ? i : i * a->step, py;
    if (a->log) py = a->px_lo + (v - a->lo) / (a->hi - a->lo) * (a->px_hi - a->px_lo);
    else if (!axis_pixel(a, v, &py)) continue;
    char label[32];
    tick_label(label, sizeof label, a, v);
    fprintf(f,
            "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            fr->left, fr->right, py, py, fr->left - 5, py + 4, label);
  }
}

static void x_ticks(FILE *f, const frame *fr, const axis *a) {
  for (double i = ceil(a->lo / a->step - 1e-9); i * a->step <= a->hi + 1e-9; i++) {
    double px;
    if (!axis_pixel(a, i * a->step, &px)) continue;
    char label[32];
    tick_label(label, sizeof label, a, i * a->step);
    fprintf(f,
            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#999\"/>"
            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
            px, px, fr->bottom, fr->bottom + 4, px, fr->bottom + 16, label);
  }
}

static void axis_labels(FILE *f, const frame *fr, const dlc_plot *p, int extra_bottom) {
  fprintf(f,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
          "stroke=\"#999\"/>\n",
          fr->left, fr->top, fr->right - fr->left, fr->bottom - fr->top);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (fr->left + fr->right) / 2,
          fr->bottom + BOTTOM + extra_bottom - 12);
  put_text(f, p->xlabel ? p->xlabel : "", 64);
  fprintf(f,
          "</text>\n<text transform=\"translate(14,%d) rotate(-90)\" "
          "text-anchor=\"middle\">",
          (fr->top + fr->bottom) / 2);
  put_text(f, p->ylabel ? p->ylabel : "", 64);
  fputs("</text>\n", f);
}

static void legend(FILE *f, const frame *fr, const dlc_plot_series *s, int ns, bool bars) {
  int x = LEFT, y = fr->legend_top;
  for (int i = 0; i < ns; i++) {
    const char *name = s[i].name ? s[i].name : "";
    int w = 40 + 7 * text_chars(name, LEGEND_CHARS);
    if (x + w > fr->width && x > LEFT) x = LEFT, y += LEGEND_ROW;
    const char *color = series_color(&s[i], i);
    if (bars)
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"18\" height=\"9\" fill=\"%s\"/>", x, y + 2,
              color);
    else
      fprintf(f,
              "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" "
              "stroke-width=\"2\"%s/>",
              x, x + 18, y + 7, y + 7, color, s[i].dashed ? " stroke-dasharray=\"5,3\"" : "");
    fprintf(f, "<text x=\"%d\" y=\"%d\">", x + 23, y + 11);
    put_text(f, name, LEGEND_CHARS);
    fputs("</text>\n", f);
    x += w;
  }
}

static bool has_limit(const dlc_plot *p) { return p->limit_label && isfinite(p->limit); }

static void limit_line(FILE *f, const frame *fr, const axis *ay, const dlc_plot *p) {
  double py;
  if (!has_limit(p) || !axis_pixel(ay, p->limit, &py)) return;
  fprintf(f,
          "<line class=\"limit\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" "
          "stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"6,3\"/>"
          "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#d62728\">",
          fr->left, fr->right, py, py, fr->right - 3, py - 3);
  put_text(f, p->limit_label, LEGEND_CHARS);
  fputs("</text>\n", f);
}

static void no_data(FILE *f, const frame *fr) {
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888\">no finite values "
          "to plot</text>\n",
          (fr->left + fr->right) / 2, (fr->top + fr->bottom) / 2);
}

/* ---- lines -------------------------------------------------------------------- */

/* Draws one series: points go into pixel columns; each column contributes
 * its lowest and highest point, in the order they came. */
typedef struct pen {
  FILE *f;
  const char *color;
  bool dashed;
  int npts; /* points in the current unbroken segment */
  double first_x, first_y;
  bool open; /* a column is being collected */
  int col;
  double lo_x, lo_y, hi_x, hi_y;
  bool lo_first;
} pen;

static void pen_point(pen *p, double x, double y) {
  if (p->npts == 0) {
    p->first_x = x;
    p->first_y = y;
  } else {
    if (p->npts == 1)
      fprintf(p->f,
              "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s "
              "points=\"%.1f,%.1f",
              p->color, p->dashed ? " stroke-dasharray=\"5,3\"" : "", p->first_x, p->first_y);
    fprintf(p->f, " %.1f,%.1f", x, y);
  }
  p->npts++;
}

static void pen_flush_column(pen *p) {
  if (!p->open) return;
  p->open = false;
  if (p->lo_y == p->hi_y) pen_point(p, p->lo_x, p->lo_y);
  else if (p->lo_first) pen_point(p, p->lo_x, p->lo_y), pen_point(p, p->hi_x, p->hi_y);
  else pen_point(p, p->hi_x, p->hi_y), pen_point(p, p->lo_x, p->lo_y);
}

/* A gap or the end of the series: an isolated point becomes a dot. */
static void pen_break(pen *p) {
  pen_flush_column(p);
  if (p->npts == 1)
    fprintf(p->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", p->first_x,
            p->first_y, p->color);
  else if (p->npts > 1) fputs("\"/>\n", p->f);
  p->npts = 0;
}

static void pen_add(pen *p, double x, double y) {
  int col = (int)floor(x);
  if (p->open && col == p->col) {
    if (y < p->lo_y) p->lo_x = x, p->lo_y = y, p->lo_first = false;
    else if (y > p->hi_y) p->hi_x = x, p->hi_y = y, p->lo_first = true;
    return;
  }
  pen_flush_column(p);
  p->open = true;
  p->col = col;
  p->lo_x = p->hi_x = x;
  p->lo_y = p->hi_y = y;
  p->lo_first = true;
}

static void draw_series(FILE *f, const dlc_plot_series *s, const char *color, const axis *ax,
                        const axis *ay) {
  pen p = {.f = f, .color = color, .dashed = s->dashed};
  for (int64_t i = 0; i < s->n; i++) {
    double px, py;
    if (axis_pixel(ax, (double)(s->x0 + i), &px) && axis_pixel(ay, s->y[i], &py))
      pen_add(&p, px, py);
    else pen_break(&p);
  }
  pen_break(&p);
}

static bool has_band(const dlc_plot_series *s) { return s->band_lo && s->band_hi; }

/* Step i of s as pixels: the value and its band; false where any is not
 * finite. */
static bool band_pixels(const dlc_plot_series *s, int64_t i, const axis *ax, const axis *ay,
                        double *px, double *plo, double *phi) {
  return axis_pixel(ax, (double)(s->x0 + i), px) && axis_pixel(ay, s->band_lo[i], plo) &&
         axis_pixel(ay, s->band_hi[i], phi);
}

/* The band as one polygon per run of finite steps: the upper edge left
 * to right, then the lower edge back. */
static void draw_band(FILE *f, const dlc_plot_series *s, const char *color, const axis *ax,
                      const axis *ay) {
  for (int64_t start = 0; start < s->n;) {
    int64_t end = start;
    double px, plo, phi;
    while (end < s->n && band_pixels(s, end, ax, ay, &px, &plo, &phi)) end++;
    if (end > start) {
      fprintf(f,
              "<polygon class=\"band\" fill=\"%s\" fill-opacity=\"0.2\" stroke=\"none\" "
              "points=\"",
              color);
      for (int64_t i = start; i < end; i++) {
        band_pixels(s, i, ax, ay, &px, &plo, &phi);
        fprintf(f, "%s%.1f,%.1f", i > start ? " " : "", px, phi);
      }
      for (int64_t i = end - 1; i >= start; i--) {
        band_pixels(s, i, ax, ay, &px, &plo, &phi);
        fprintf(f, " %.1f,%.1f", px, plo);
      }
      fputs("\"/>\n", f);
    }
    start = end + 1;
  }
}

/* A red ring on each value outside its band (the first of each pixel
 * column, so a run that left the band for good stays readable). */
static void mark_outside(FILE *f, const dlc_plot_series *s, const axis *ax, const axis *ay) {
  int last_col = -1;
  for (int64_t i = 0; i < s->n; i++) {
    double y = s->y[i], px, py, plo, phi;
    if (!(y < s->band_lo[i] || y > s->band_hi[i])) continue;
    if (!band_pixels(s, i, ax, ay, &px, &plo, &phi) || !axis_pixel(ay, y, &py)) continue;
    if ((int)floor(px) == last_col) continue;
    last_col = (int)floor(px);
    fprintf(f,
            "<circle class=\"outside\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"none\" "
            "stroke=\"#d62728\" stroke-width=\"1.5\"><title>",
            px, py);
    put_text(f, s->name ? s->name : "", 40);
    fprintf(f, " at step %lld: %.9g outside [%.9g, %.9g]</title></circle>\n",
            (long long)(s->x0 + i), y, s->band_lo[i], s->band_hi[i]);
  }
}

void dlc_svg_lines(FILE *f, const dlc_plot *p, const dlc_plot_series *s, int ns) {
  extent e = {0};
  int64_t xlo = 0, xhi = -1;
  for (int k = 0; k < ns; k++) {
    for (int64_t i = 0; i < s[k].n; i++) extent_add(&e, s[k].y[i]);
    for (int64_t i = 0; has_band(&s[k]) && i < s[k].n; i++) {
      extent_add(&e, s[k].band_lo[i]);
      extent_add(&e, s[k].band_hi[i]);
    }
    if (s[k].n <= 0) continue;
    if (xhi < xlo || s[k].x0 < xlo) xlo = s[k].x0;
    if (s[k].x0 + s[k].n - 1 > xhi) xhi = s[k].x0 + s[k].n - 1;
  }
  bool any = e.any; /* data, not the limit */
  if (has_limit(p)) extent_add(&e, p->limit);
  frame fr = make_frame(p, s, ns, 0);
  axis ax = {0}, ay = {0};
  if (xhi < xlo) xlo = xhi = 0;
  /* a single step sits in the middle of the frame */
  linear_axis(&ax, (double)xlo - (xlo == xhi ? 0.5 : 0), (double)xhi + (xlo == xhi ? 0.5 : 0), 1);
  ax.px_lo = fr.left;
  ax.px_hi = fr.right;
  if (p->logy) log_axis(&ay, &e);
  else {
    linear_axis(&ay, e.any ? e.min : 0, e.any ? e.max : 1, 0);
    round_out(&ay);
  }
  ay.px_lo = fr.bottom;
  ay.px_hi = fr.top;
  open_svg(f, &fr, p);
  y_ticks(f, &fr, &ay);
  x_ticks(f, &fr, &ax);
  for (int k = 0; k < ns; k++)
    if (has_band(&s[k])) draw_band(f, &s[k], series_color(&s[k], k), &ax, &ay);
  for (int k = 0; k < ns; k++) draw_series(f, &s[k], series_color(&s[k], k), &ax, &ay);
  for (int k = 0; k < ns; k++)
    if (has_band(&s[k])) mark_outside(f, &s[k], &ax, &ay);
  limit_line(f, &fr, &ay, p);
  if (!any) no_data(f, &fr);
  else if (p->logy && !e.anypos)
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888\">every value "
            "is 0</text>\n",
            (fr.left + fr.right) / 2, (fr.top + fr.bottom) / 2);
  axis_labels(f, &fr, p, 0);
  legend(f, &fr, s, ns, false);
  fputs("</svg>\n", f);
}

/* ---- bars ------------------------------------------------------------------- */

static void draw_bar(FILE *f, const frame *fr, const axis *ay, double x, double w, double v,
                     const char *color, bool over, const char *series, const char *category) {
  double base = ay->log ? ay->px_lo : 0, top;
  if (!ay->log && !axis_pixel(ay, 0, &base)) return;
  if (isnan(v)) return;
  if (isinf(v)) top = v > 0 ? fr->top : fr->bottom;
  else if (!axis_pixel(ay, v, &top)) return;
  double y = fmin(top, base), h = fabs(base - top);
  if (h < 1) h = 1, y = base - 1; /* a zero is a visible sliver */
  fprintf(f, "<rect%s x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>",
          over ? " class=\"over\"" : "", x, y, w, h, over ? "#d62728" : color);
  put_text(f, series, 64);
  fputs(", ", f);
  put_text(f, category, 64);
  fprintf(f, ": %.4g</title></rect>\n", v);
  if (isinf(v) && v > 0) /* off the scale: say so above the bar */
    fprintf(f,
            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\">"
            "\xe2\x88\x9e</text>\n",
            x + w / 2, fr->top - 2);
}

void dlc_svg_bars(FILE *f, const dlc_plot *p, const char *const *categories, int ncat,
                  const dlc_plot_series *s, int ns) {
  extent e = {0};
  for (int k = 0; k < ns; k++)
    for (int64_t c = 0; c < s[k].n && c < ncat; c++) extent_add(&e, s[k].y[c]);
  bool any = e.any; /* data, not the limit */
  if (has_limit(p)) extent_add(&e, p->limit);
  frame fr = make_frame(p, s, ns, CATEGORY_SPACE);
  axis ay = {0};
  if (p->logy) log_axis(&ay, &e);
  else {
    linear_axis(&ay, e.any ? fmin(e.min, 0) : 0, e.any ? fmax(e.max, 0) : 1, 0);
    round_out(&ay);
  }
  ay.px_lo = fr.bottom;
  ay.px_hi = fr.top;
  open_svg(f, &fr, p);
  y_ticks(f, &fr, &ay);
  double group = (double)(fr.right - fr.left) / (ncat > 0 ? ncat : 1);
  double bar = group * 0.8 / (ns > 0 ? ns : 1);
  for (int c = 0; c < ncat; c++) {
    double gx = fr.left + c * group;
    for (int k = 0; k < ns; k++)
      if (c < s[k].n)
        draw_bar(f, &fr, &ay, gx + group * 0.1 + k * bar, bar, s[k].y[c], series_color(&s[k], k),
                 has_limit(p) && s[k].y[c] > p->limit, s[k].name ? s[k].name : "", categories[c]);
    fprintf(f, "<text transform=\"translate(%.1f,%d) rotate(-35)\" text-anchor=\"end\">",
            gx + group / 2, fr.bottom + 12);
    put_text(f, categories[c], CATEGORY_CHARS);
    fputs("</text>\n", f);
  }
  limit_line(f, &fr, &ay, p);
  if (!any) no_data(f, &fr);
  axis_labels(f, &fr, p, CATEGORY_SPACE);
  legend(f, &fr, s, ns, true);
  fputs("</svg>\n", f);
}
