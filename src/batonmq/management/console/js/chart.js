// Charts drawn on a <canvas>: lines over time (rates, depths) and horizontal bars (the deepest
// queues). No library: the console loads nothing from outside the broker.

const COLOURS = ["#2f5da8", "#d0702c", "#1e7a3c", "#8e3ba8", "#b3261e"];
const FONT = '12px system-ui, "DejaVu Sans", sans-serif';

// The canvas sized to its box at the screen's pixel ratio; its 2D context in CSS pixels.
function surface(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 400;
  const height = canvas.clientHeight || 200;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const context = canvas.getContext("2d");
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  context.clearRect(0, 0, width, height);
  context.font = FONT;
  return { context, width, height };
}

// A round upper bound for the axis: 1, 2 or 5 times a power of ten.
function ceiling(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((step) => step * power).find((bound) => bound >= value);
}

function label(value) {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

// Lines: `series` is [{label, values: [number, ...]}], one value per sample, oldest first;
// `capacity` samples span the width.
export function drawLines(canvas, series, capacity) {
  const { context, width, height } = surface(canvas);
  const left = 44;
  const top = 22;
  const bottom = height - 18;
  const right = width - 8;
  const highest = ceiling(Math.max(0, ...series.flatMap((line) => line.values)));
  context.strokeStyle = "#d6dae2";
  context.fillStyle = "#5b6475";
  context.textBaseline = "middle";
  for (const fraction of [0, 0.5, 1]) {
    const y = bottom - fraction * (bottom - top);
    context.beginPath();
    context.moveTo(left, y);
    context.lineTo(right, y);
    context.stroke();
    context.textAlign = "right";
    context.fillText(label(highest * fraction), left - 6, y);
  }
  const step = (right - left) / Math.max(1, capacity - 1);
  series.forEach((line, index) => {
    const colour = COLOURS[index % COLOURS.length];
    const offset = capacity - line.values.length;
    context.strokeStyle = colour;
    context.lineWidth = 2;
    context.beginPath();
    line.values.forEach((value, at) => {
      const x = left + (offset + at) * step;
      const y = bottom - (value / highest) * (bottom - top);
      if (at === 0) context.moveTo(x, y);
      else context.lineTo(x, y);
    });
    context.stroke();
    context.lineWidth = 1;
    context.fillStyle = colour;
    context.textAlign = "left";
    context.fillText(line.label, left + index * 110, top - 12);
  });
}

// Bars: `bars` is [{label, value}], largest first.
export function drawBars(canvas, bars) {
  const { context, width, height } = surface(canvas);
  const left = 150;
  const right = width - 60;
  const rows = Math.max(bars.length, 1);
  const band = Math.min(28, (height - 8) / rows);
  const highest = ceiling(Math.max(0, ...bars.map((bar) => bar.value)));
  context.textBaseline = "middle";
  if (!bars.length) {
    context.fillStyle = "#5b6475";
    context.fillText("No queues", 8, height / 2);
    return;
  }
  bars.forEach((bar, index) => {
    const y = 4 + index * band;
    const length = (bar.value / highest) * (right - left);
    context.fillStyle = "#1d2330";
    context.textAlign = "right";
    const name = bar.label.length > 22 ? `${bar.label.slice(0, 21)}…` : bar.label;
    context.fillText(name, left - 8, y + band / 2);
    context.fillStyle = COLOURS[0];
    context.fillRect(left, y + 3, Math.max(1, length), band - 6);
    context.fillStyle = "#5b6475";
    context.textAlign = "left";
    context.fillText(String(bar.value), left + length + 6, y + band / 2);
  });
}
