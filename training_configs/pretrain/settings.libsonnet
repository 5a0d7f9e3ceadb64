// Settings checks shared by the config builders (elmoc.libsonnet, baselines.libsonnet): a key a
// builder does not know is an error naming it and the known key it most probably meant, never
// silently ignored.
// Levenshtein distance, one row at a time. Each cell is evaluated when it is appended: lazy cells
// would nest a thunk per cell and exhaust jsonnet's stack.
local editDistance(a, b) =
  local lengthB = std.length(b);
  local cell(previous, row, i, j) =
    std.min(
      std.min(previous[j] + 1, row[j - 1] + 1),
      previous[j - 1] + (if a[i - 1] == b[j - 1] then 0 else 1)
    );
  // `tailstrict` evaluates each cell before it is appended.
  local append(row, value) = row + [value];
  local nextRow(previous, i) =
    std.foldl(function(row, j) append(row, cell(previous, row, i, j)) tailstrict, std.range(1, lengthB), [i]);
  std.foldl(nextRow, std.range(1, std.length(a)), std.range(0, lengthB))[lengthB];

// The known key nearest to `key` (the distance is at least the difference of the lengths, so
// keys too long or too short to beat the best so far are skipped).
local closest(key, known) =
  std.foldl(
    function(best, candidate)
      if best != null && std.abs(std.length(candidate) - std.length(key)) >= best.distance then best
      else
        local distance = editDistance(key, candidate);
        if best == null || distance < best.distance then { name: candidate, distance: distance } else best,
    std.sort(known, function(candidate) std.abs(std.length(candidate) - std.length(key))),
    null
  ).name;

{
  editDistance:: editDistance,
  closest:: closest,

  // `settings` if every one of its keys is in `known`; otherwise an error from `builder`.
  check(builder, known, settings)::
    local unknown = [key for key in std.objectFields(settings) if !std.member(known, key)];
    if std.length(unknown) == 0 then settings
    else error (
      builder + ': unknown setting' + (if std.length(unknown) > 1 then 's ' else ' ') + std.join(', ', [
        '"' + key + '" (did you mean "' + closest(key, known) + '"?)'
        for key in unknown
      ])
    ),

  // An error when `key` is set (in `settings`) although `condition` says it does not apply.
  onlyWith(settings, key, condition, why)::
    if std.objectHas(settings, key) && !condition then error (key + ' ' + why) else null,
}
