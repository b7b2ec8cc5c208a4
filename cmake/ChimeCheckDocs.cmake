# SPDX-License-Identifier: BSL-1.0
# cmake -DSOURCE_DIR=<checkout> -P ChimeCheckDocs.cmake        (ctest docs_references, scripts/check-docs)
#
# Words that cannot drift: fails, naming each one, on
# - a cited repository path that does not exist: a file or folder named in a comment of a
#   source file (include/ runtime/ tests/ stress/ fuzz/ bench/ examples/ scripts/ cmake/ .ci/)
#   or anywhere in a doc (README.md, CONTRIBUTING.md, docs/*.md): `runtime/wheel_thread.cpp`,
#   `timer_state.hpp`, `scripts/test`, `(state-machine.md)`;
# - a cited heading that the file does not have: `docs/benchmarks.md#some-heading` (GitHub's
#   anchor: lower case, punctuation dropped, spaces to hyphens), `(#heading)` inside a doc,
#   and `docs/state-machine.md, "Heading"` (a heading or a bold title of that file contains
#   the quoted text);
# - a top-level folder of the repository that README.md's "## Layout" section does not list;
# - a file of include/chime/ or runtime/ that docs/map.md does not name;
# - a test cited as `Suite.test_name` in a doc that no TEST, TEST_F or TEST_P defines;
# - history narrated by work session or by chime's own issue numbers, in any tracked file
#   ("Code and docs say what is" below: the patterns, and how another project's tracker is cited);
# - a guarantee ID `G<n>` cited in README.md, CONTRIBUTING.md or docs/*.md that no header defines
#   once as `// G<n> (name): ...` ("Guarantee IDs" below).
#
# How a citation resolves (first match wins): the path itself, the path relative to the citing
# file's folder, a repository path ending in "/<path>" (`chime/runtime.hpp`,
# `detail/assert.hpp`), or, for a bare name, a repository file of that name. Names outside the
# repository (other projects' files: `boost/...`, `tokio/src/...`) are recognised by the
# roots and names listed below. Only names with the extensions below, or paths that start
# with a top-level folder of the repository, count as citations.
#
# The files are those git tracks or would track (`git ls-files --cached --others
# --exclude-standard`: new files count before they are added), or every file under SOURCE_DIR except
# build/ when SOURCE_DIR is not a git checkout.
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "ChimeCheckDocs.cmake: -DSOURCE_DIR=<checkout> is required")
endif()
get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)

# Other projects' paths and names that chime's comments cite.
# share/chime/ is the installed layout (cmake/ChimeInstall.cmake).
set(external_roots
  share/chime/ absl/ asio/ benchmark/ bits/ boost/ concurrentqueue/ folly/ gtest/ include/boost include/seastar
  janestreet/ kernel/ lib/ linux/ moodycamel/ seastar/ src/ sys/ tokio/ usr/)
# Generated files, and bare names of other projects' files.
set(external_names chimeConfig.cmake chimeConfigVersion.cmake timer_queue.hpp)

# ---------------------------------------------------------------------------------------------
# The repository's files.
find_program(CHIME_GIT git)
set(files)
if(CHIME_GIT AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${CHIME_GIT}" -c core.quotepath=off ls-files --cached --others --exclude-standard
                  WORKING_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "git ls-files failed in ${SOURCE_DIR}")
  endif()
  string(REPLACE "\n" ";" files "${out}")
  list(FILTER files EXCLUDE REGEX "^$")
  # Files deleted in the work tree but not yet from the index are gone.
  set(present)
  foreach(f IN LISTS files)
    if(EXISTS "${SOURCE_DIR}/${f}")
      list(APPEND present "${f}")
    endif()
  endforeach()
  set(files ${present})
else()
  file(GLOB_RECURSE files LIST_DIRECTORIES false RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/*")
  list(FILTER files EXCLUDE REGEX "^(build|\\.git)/")
endif()

set(top_dirs)
foreach(f IN LISTS files)
  set("f:${f}" 1)
  # Every folder that holds it, and every tail after a '/' (for `chime/runtime.hpp`).
  set(rest "${f}")
  while(rest MATCHES "^([^/]+)/(.*)$")
    set(head "${CMAKE_MATCH_1}")
    set(rest "${CMAKE_MATCH_2}")
    set("tail:${rest}" 1)
  endwhile()
  set(d "${f}")
  while(d MATCHES "^(.*)/[^/]+$")
    set(d "${CMAKE_MATCH_1}")
    set("d:${d}" 1)
  endwhile()
  if(f MATCHES "^([^/]+)/")
    list(APPEND top_dirs "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(REMOVE_DUPLICATES top_dirs)
list(SORT top_dirs)
string(REPLACE "." "\\." top_alt "${top_dirs}")
string(REPLACE ";" "|" top_alt "${top_alt}")

# ---------------------------------------------------------------------------------------------
# Helpers.

# GitHub's anchor for a heading: lower case, drop what is not a letter, digit, space, '-' or
# '_' (non-ASCII letters such as 'µ' stay; symbols such as '→' go, so both forms are tried),
# spaces to '-'.
function(chime_slugs heading out)
  string(REGEX REPLACE "^#+[ \t]*" "" h "${heading}")
  string(STRIP "${h}" h)
  string(TOLOWER "${h}" h)
  string(REGEX REPLACE "[]!\"#$%&'()*+,./:;<=>?@[\\^`{|}~]" "" keep "${h}")
  string(REPLACE " " "-" keep "${keep}")
  string(REGEX REPLACE "[^a-z0-9 _-]" "" ascii "${h}")
  string(REPLACE " " "-" ascii "${ascii}")
  set(${out} "${keep};${ascii}" PARENT_SCOPE)
endfunction()

# Reads the headings of a Markdown file once: h_<file> (their texts, '|'-joined) and
# slug:<file>:<anchor> (set for each anchor). Skips fenced code blocks.
function(chime_load_headings file)
  if(DEFINED "h_${file}")
    return()
  endif()
  file(STRINGS "${SOURCE_DIR}/${file}" lines REGEX "^(#|```)|[*][*]")
  set(texts "|")
  set(in_code FALSE)
  foreach(line IN LISTS lines)
    if(line MATCHES "^```")
      if(in_code)
        set(in_code FALSE)
      else()
        set(in_code TRUE)
      endif()
      continue()
    endif()
    if(in_code)
      continue()
    endif()
    # A bold title (`**Shutdown vs cancel.**`) is a section too, for quoted citations.
    string(REGEX MATCHALL "[*][*][^*]+[*][*]" bold "${line}")
    foreach(t IN LISTS bold)
      string(REPLACE "*" "" t "${t}")
      string(REPLACE "`" "" t "${t}")
      string(APPEND texts "${t}|")
    endforeach()
    if(NOT line MATCHES "^#+ ")
      continue()
    endif()
    chime_slugs("${line}" slugs)
    foreach(s IN LISTS slugs)
      set("slug:${file}:${s}" 1 PARENT_SCOPE)
    endforeach()
    string(REGEX REPLACE "^#+[ \t]*" "" t "${line}")
    string(REPLACE "`" "" t "${t}")
    string(APPEND texts "${t}|")
  endforeach()
  set("h_${file}" "${texts}" PARENT_SCOPE)
endfunction()

# Normalises a/b/../c to a/c and drops ./ parts.
function(chime_normalize path out)
  string(REGEX REPLACE "(^|/)\\./" "\\1" p "${path}")
  while(p MATCHES "(^|/)[^/.][^/]*/\\.\\./")
    string(REGEX REPLACE "(^|/)[^/.][^/]*/\\.\\./" "\\1" p "${p}")
  endwhile()
  set(${out} "${p}" PARENT_SCOPE)
endfunction()

# Sets ${out} to the repository file or folder that `cited` (seen in `from`) names, to
# "external" for another project's name, or to "" if it names nothing.
function(chime_resolve cited from out)
  string(REGEX REPLACE "/$" "" c "${cited}")
  get_filename_component(from_dir "${from}" DIRECTORY)
  set(candidates "${c}")
  if(from_dir)
    chime_normalize("${from_dir}/${c}" rel)
    list(APPEND candidates "${rel}")
  endif()
  foreach(p IN LISTS candidates)
    if(DEFINED "f:${p}" OR DEFINED "d:${p}")
      set(${out} "${p}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  if(DEFINED "tail:${c}")
    set(${out} "tail" PARENT_SCOPE)
    return()
  endif()
  foreach(root IN LISTS external_roots)
    string(FIND "${c}" "${root}" at)
    if(at EQUAL 0)
      set(${out} "external" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  if(c IN_LIST external_names)
    set(${out} "external" PARENT_SCOPE)
    return()
  endif()
  set(${out} "" PARENT_SCOPE)
endfunction()

# The line of `text` at which `needle` first occurs.
function(chime_line_of text needle out)
  string(FIND "${text}" "${needle}" at)
  if(at LESS 0)
    set(${out} "?" PARENT_SCOPE)
    return()
  endif()
  string(SUBSTRING "${text}" 0 ${at} before)
  string(REGEX REPLACE "[^\n]" "" newlines "${before}")
  string(LENGTH "${newlines}" n)
  math(EXPR n "${n} + 1")
  set(${out} ${n} PARENT_SCOPE)
endfunction()

set(problems)
macro(chime_problem msg)
  list(APPEND problems "${msg}")
endmacro()

# ---------------------------------------------------------------------------------------------
# The files whose citations are checked.
set(scanned)
foreach(f IN LISTS files)
  if(f MATCHES "^fuzz/(corpus|crashes)/" OR f STREQUAL "cmake/ChimeCheckDocs.cmake")
    continue()  # data, and this file's own examples
  elseif(f MATCHES "^(README|CONTRIBUTING)\\.md$" OR f MATCHES "^docs/[^/]+\\.md$")
    list(APPEND scanned "${f}")
  elseif(f MATCHES "^(include|runtime|tests|stress|fuzz|bench|examples|scripts|cmake|\\.ci)/"
         OR f STREQUAL "CMakeLists.txt")
    if(f MATCHES "\\.(hpp|cpp|h|cmake|in|supp|txt)$" OR f MATCHES "^(scripts|\\.ci)/")
      list(APPEND scanned "${f}")
    endif()
  endif()
endforeach()

set(ext "hpp|cpp|md|cmake|supp|sh")
set(path_chars "A-Za-z0-9_./-")
foreach(f IN LISTS scanned)
  file(READ "${SOURCE_DIR}/${f}" text)
  # Characters CMake lists treat specially, out of the way (no citation contains them).
  string(REGEX REPLACE "[][;\\]" " " clean "${text}")
  if(f MATCHES "\\.md$")
    set(body "${clean}")
  elseif(f MATCHES "\\.(hpp|cpp|h)$")
    string(REGEX MATCHALL "//[^\n]*" comments "${clean}")
    string(REPLACE ";" "\n" body "${comments}")
  else()
    string(REGEX MATCHALL "#[^\n]*" comments "${clean}")
    string(REPLACE ";" "\n" body "${comments}")
  endif()
  # URLs are not repository paths.
  string(REGEX REPLACE "[a-z]+://[^ \t\n)>\"'`]*" " " body "${body}")
  string(REPLACE ";" " " body "${body}")

  # Words made of path characters; a citation is one that ends in a checked extension
  # (a header's `<name>.hpp`, `docs/<page>.md#anchor`) or starts with a top-level folder (`scripts/test`,
  # `bench/instructions/`). Globs and placeholders (`runtime_*_test.cpp`, `regression-<sha>`)
  # are not citations.
  string(REGEX MATCHALL "[A-Za-z0-9_./*<>{}#-]+" words "${body}")
  set(cites)
  foreach(m IN LISTS words)
    string(REGEX REPLACE "[.]+$" "" m "${m}")
    if(m MATCHES "[*<>{}]" OR NOT m MATCHES "^[A-Za-z0-9_.]" OR m MATCHES "^[.]+$")
      continue()
    endif()
    if(m MATCHES "^[A-Za-z0-9_./-]*[A-Za-z0-9_-]\\.(${ext})(#[A-Za-z0-9_-]+)?$"
       OR m MATCHES "^(${top_alt})/[A-Za-z0-9_./-]*$")
      list(APPEND cites "${m}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES cites)

  foreach(c IN LISTS cites)
    set(anchor "")
    set(path "${c}")
    if(c MATCHES "^([^#]*)#(.*)$")
      set(path "${CMAKE_MATCH_1}")
      set(anchor "${CMAKE_MATCH_2}")
    endif()
    chime_resolve("${path}" "${f}" target)
    if(target STREQUAL "")
      chime_line_of("${text}" "${c}" line)
      chime_problem("${f}:${line}: cites ${path}, which is not in the repository")
    elseif(anchor AND target MATCHES "\\.md$")
      chime_load_headings("${target}")
      if(NOT DEFINED "slug:${target}:${anchor}")
        chime_line_of("${text}" "${c}" line)
        chime_problem("${f}:${line}: cites ${target}#${anchor}, but ${target} has no such heading")
      endif()
    endif()
  endforeach()

  # `<page>.md`, "Heading": a heading of that file contains the quoted text.
  string(REGEX MATCHALL "[A-Za-z0-9_./-]+\\.md`?[,:]?[ \n]+(//[ ]*)?\"[^\"\n]+\"" quoted "${body}")
  foreach(q IN LISTS quoted)
    string(REGEX MATCH "^([A-Za-z0-9_./-]+\\.md)" _ "${q}")
    set(path "${CMAKE_MATCH_1}")
    string(REGEX MATCH "\"([^\"]+)\"$" _ "${q}")
    set(heading "${CMAKE_MATCH_1}")
    string(REPLACE "`" "" heading "${heading}")
    chime_resolve("${path}" "${f}" target)
    if(target MATCHES "\\.md$")
      chime_load_headings("${target}")
      string(FIND "${h_${target}}" "${heading}" at)
      if(at LESS 0)
        chime_line_of("${text}" "\"${heading}" line)
        chime_problem("${f}:${line}: cites ${target}, \"${heading}\", but no heading of ${target} says that")
      endif()
    endif()
  endforeach()

  # (#anchor) inside a doc: a heading of the same file.
  if(f MATCHES "\\.md$")
    string(REGEX MATCHALL "\\(#[A-Za-z0-9_-]+\\)" local "${body}")
    foreach(a IN LISTS local)
      string(REGEX REPLACE "^\\(#|\\)$" "" a "${a}")
      chime_load_headings("${f}")
      if(NOT DEFINED "slug:${f}:${a}")
        chime_line_of("${text}" "#${a}" line)
        chime_problem("${f}:${line}: links to #${a}, but ${f} has no such heading")
      endif()
    endforeach()
  endif()
endforeach()

# ---------------------------------------------------------------------------------------------
# README.md's layout lists every top-level folder.
if(EXISTS "${SOURCE_DIR}/README.md")
  file(READ "${SOURCE_DIR}/README.md" readme)
  string(REGEX REPLACE "[][;\\]" " " readme "${readme}")
  if(readme MATCHES "\n## Layout\n(.*)")
    string(REGEX REPLACE "\n## .*" "" layout "${CMAKE_MATCH_1}")
    foreach(d IN LISTS top_dirs)
      string(REPLACE "." "\\." d_re "${d}")
      if(NOT layout MATCHES "(^|\n|[ \t])${d_re}/")
        chime_problem("README.md: the \"## Layout\" section does not list the folder ${d}/")
      endif()
    endforeach()
  else()
    chime_problem("README.md: no \"## Layout\" section")
  endif()
endif()

# docs/map.md names every file of include/chime/ and runtime/.
if(EXISTS "${SOURCE_DIR}/docs/map.md")
  file(READ "${SOURCE_DIR}/docs/map.md" map)
  foreach(f IN LISTS files)
    if(f MATCHES "^(include/chime|runtime)/")
      string(FIND "${map}" "`${f}`" at)
      if(at LESS 0)
        chime_problem("docs/map.md: does not name ${f} (add a row for it)")
      endif()
    endif()
  endforeach()
else()
  chime_problem("docs/map.md is missing")
endif()

# Every test cited in a doc as `Suite.test_name` (also `Prefix/Suite.test_name/param`) is one
# that tests/ or stress/ define with TEST, TEST_F or TEST_P, so a renamed test cannot leave a
# dead reference. Only suites that exist are checked (`std.move` and the like are not tests).
set(test_suites)
set(test_names)
foreach(f IN LISTS files)
  if(f MATCHES "^(tests|stress|fuzz)/.*\\.cpp$")
    file(STRINGS "${SOURCE_DIR}/${f}" lines REGEX "TEST(_F|_P)?\\(")
    foreach(line IN LISTS lines)
      if(line MATCHES "TEST(_F|_P)?\\([ ]*([A-Za-z0-9_]+)[ ]*,[ ]*([A-Za-z0-9_]+)[ ]*\\)")
        list(APPEND test_suites "${CMAKE_MATCH_2}")
        list(APPEND test_names "${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
      endif()
    endforeach()
  endif()
endforeach()
list(REMOVE_DUPLICATES test_suites)
foreach(f IN LISTS files)
  if(f MATCHES "^(README|CONTRIBUTING)\\.md$|^docs/.*\\.md$")
    file(READ "${SOURCE_DIR}/${f}" text)
    string(REGEX MATCHALL "`([A-Za-z0-9_]+/)?[A-Z][A-Za-z0-9_]*\\.[A-Za-z][A-Za-z0-9_]*" cited "${text}")
    foreach(c IN LISTS cited)
      string(REGEX REPLACE "^`([A-Za-z0-9_]+/)?" "" c "${c}")
      string(REGEX REPLACE "\\..*" "" suite "${c}")
      if(suite IN_LIST test_suites AND NOT c IN_LIST test_names)
        chime_problem("${f}: cites the test ${c}, which no TEST, TEST_F or TEST_P defines")
      endif()
    endforeach()
  endif()
endforeach()

# ---------------------------------------------------------------------------------------------
# Code and docs say what is, not how they came to be: no file the repository tracks (this one
# and scripts/check-docs aside: they hold the patterns) narrates its history by work session or by chime's own issue
# numbers, which a reader cannot look up. Case-insensitive, anywhere in a file (comments,
# strings, docs):
#   "session" or "sessions" followed by a number; "until session", "this session",
#   "previous session", "last session", "next session";
#   "issue" or "issues" followed by a number (with or without '#').
# A citation of another project's tracker is allowed: an owner/repo prefix right before it
# (`boostorg/lockfree#78`, `cameron314/concurrentqueue#49 and #62`: only the first
# number needs the prefix) or a URL. Binary data (fuzz corpora, plots) is not read.
set(history_files)
foreach(f IN LISTS files)
  if(f STREQUAL "cmake/ChimeCheckDocs.cmake" OR f STREQUAL "scripts/check-docs" OR f MATCHES "^fuzz/corpus/"
     OR f MATCHES "\\.(png|jpg|jpeg|gif|svg|json|gz|xz|zip|pdf|bin)$")
    continue()
  endif()
  list(APPEND history_files "${f}")
endforeach()
set(sep "[ \t\n/#*]+")
foreach(f IN LISTS history_files)
  file(READ "${SOURCE_DIR}/${f}" raw)
  string(REGEX REPLACE "[][;\\]" " " raw "${raw}")
  string(TOLOWER "${raw}" low)
  set(t "${low}")
  string(REGEX REPLACE "[a-z]+://[^ \t\n)>\"'`]*" " " t "${t}")
  string(REGEX REPLACE "[a-z0-9_.-]+/[a-z0-9_.-]+${sep}(issues?|pull requests?|prs?)${sep}#?[0-9]+" " " t "${t}")
  foreach(re
      "(^|[^a-z0-9_])sessions?[ \t\n/#*]+[0-9]+"
      "(^|[^a-z0-9_])(until|this|previous|last|next)[ \t\n/#*]+session([^a-z0-9_]|$)"
      "(^|[^a-z0-9_/])issues?[ \t\n/#*]+#?[0-9]+")
    if(t MATCHES "${re}")
      set(hit "${CMAKE_MATCH_0}")
      string(REGEX REPLACE "^[^a-z]" "" hit "${hit}")
      chime_line_of("${low}" "${hit}" line)
      string(REGEX REPLACE "[ \t\n/#*]+" " " shown "${hit}")
      chime_problem("${f}:${line}: narrates history (\"${shown}\"): say what is, or cite another project's tracker as owner/repo issue N")
    endif()
  endforeach()
endforeach()

# ---------------------------------------------------------------------------------------------
# Guarantee IDs. Each guarantee is stated once, in the header that owns it, on a comment line of
# the form
#     // G7 (never early): <the guarantee>
# (`//`, the ID `G<number>`, a short name in parentheses, a colon; continuation lines follow as
# ordinary comment lines). An ID is defined exactly once across include/ and runtime/; every
# `G<number>` that README.md, CONTRIBUTING.md or docs/*.md cites must be defined.
set(guarantee_ids)
foreach(f IN LISTS files)
  if(f MATCHES "^(include|runtime)/.*\\.(hpp|h)$")
    file(READ "${SOURCE_DIR}/${f}" text)
    string(REGEX REPLACE "[][;\\]" " " text "${text}")  # a '[' would merge list items
    string(REGEX MATCHALL "(^|\n)[ \t]*// G[0-9]+ \\([^)\n]+\\):" lines "${text}")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "G[0-9]+" id "${line}")
      if(DEFINED "gdef_${id}")
        chime_problem("${f}: ${id} is defined again (first in ${gdef_${id}}), and each guarantee ID is defined once")
      else()
        set("gdef_${id}" "${f}")
        list(APPEND guarantee_ids "${id}")
      endif()
    endforeach()
  endif()
endforeach()
foreach(f IN LISTS files)
  if(f MATCHES "^(README|CONTRIBUTING)\\.md$|^docs/[^/]+\\.md$")
    file(READ "${SOURCE_DIR}/${f}" text)
    string(REGEX REPLACE "[][;\\]" " " text "${text}")
    string(REGEX MATCHALL "(^|[^A-Za-z0-9_])G[0-9]+([^A-Za-z0-9_]|$)" cited "${text}")
    set(seen)
    foreach(c IN LISTS cited)
      string(REGEX MATCH "G[0-9]+" id "${c}")
      if(NOT DEFINED "gdef_${id}" AND NOT id IN_LIST seen)
        list(APPEND seen "${id}")
        chime_line_of("${text}" "${id}" line)
        chime_problem("${f}:${line}: cites ${id}, which no header defines (as `// ${id} (name): ...`)")
      endif()
    endforeach()
  endif()
endforeach()

# Every guarantee ID has a row in docs/guarantees.md: a table line whose first cell names it
# (`| G16 (bounded memory) | tests ... |`), so no promise is left without the tests that check it.
file(READ "${SOURCE_DIR}/docs/guarantees.md" guarantees_text)
string(REGEX REPLACE "[][;\\]" " " guarantees_text "${guarantees_text}")
string(REGEX MATCHALL "\n\\| [^|\n]+\\|" guarantee_first_cells "${guarantees_text}")
set(guarantees_with_rows)
foreach(cell IN LISTS guarantee_first_cells)
  string(REGEX MATCHALL "G[0-9]+" ids_in_cell "${cell}")
  list(APPEND guarantees_with_rows ${ids_in_cell})
endforeach()
foreach(id IN LISTS guarantee_ids)
  if(NOT id IN_LIST guarantees_with_rows)
    chime_problem("docs/guarantees.md: ${id} (defined in ${gdef_${id}}) has no row naming the tests that check it")
  endif()
endforeach()

list(LENGTH scanned n_scanned)
list(LENGTH problems n_problems)
foreach(p IN LISTS problems)
  message("${p}")
endforeach()
if(n_problems GREATER 0)
  message(FATAL_ERROR "docs references: ${n_problems} broken in ${n_scanned} files")
endif()
message(STATUS "docs references: all citations resolve in ${n_scanned} files")
