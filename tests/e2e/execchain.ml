(* execchain.ml — e2e program: an OCaml program that replaces itself by
   exec twice, as a launcher or `dune exec` does: image 0, 1 and 2 of one
   process (one pid), each spending its CPU in a function of its own
   ([work0], [work1], [work2], ~0.3 s each), printing "image N pid=P", and
   execv-ing image N+1. The checker asserts each image's profile is kept
   (none replaced by the next image's, which has the same pid) and holds
   that image's work.
   Usage: execchain.exe [N] (the image, default 0) *)

let[@inline never] spin n seed =
  let acc = ref seed in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

(* Not a tail call: the work function stays on the stack under [spin]. *)
let[@inline never] work0 () = spin 160_000_000 1 + 1
let[@inline never] work1 () = spin 160_000_000 2 + 1
let[@inline never] work2 () = spin 160_000_000 3 + 1

let () =
  let n = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 0 in
  let r = match n with 0 -> work0 () | 1 -> work1 () | _ -> work2 () in
  Printf.printf "image %d pid=%d (%d)\n%!" n (Unix.getpid ()) (r land 1);
  if n < 2 then Unix.execv Sys.executable_name [| Sys.executable_name; string_of_int (n + 1) |]
