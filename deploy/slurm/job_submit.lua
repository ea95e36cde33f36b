--[[
job_submit.lua for a partition scheduled by dltsched (`dltsched slurm`).

Install: set `JobSubmitPlugins=lua` in slurm.conf and copy this file next to slurm.conf
(e.g. /etc/slurm/job_submit.lua); `scontrol reconfigure`.

For jobs submitted to the dltsched partition it enforces the convention the daemon relies on:
  * the job is submitted held (priority 0), so that only dltsched releases it;
  * its --comment starts with "dltsched:" and names model, batch and iters
    (e.g. --comment "dltsched:model=resnet50,batch=64,iters=1000,step_s=0.21");
  * it asks for GPUs with --gres=gpu[:type]:N (or --gpus-per-node).
Users cannot release their own jobs in that partition (job_modify refuses priority changes and
releases from anyone but the dltsched operator account or root).
--]]

local PARTITION = "dltsched"
-- uids allowed to release jobs and change their priority: root and the account dltsched runs as
-- (put its uid here: `id -u dltsched`)
local OPERATOR_UIDS = { [0] = true }
local REQUIRED_KEYS = { "model", "batch", "iters" }

local function in_partition(partition)
   if partition == nil then return false end
   for p in string.gmatch(partition, "[^,]+") do
      if p == PARTITION then return true end
   end
   return false
end

local function check_comment(comment)
   if comment == nil or string.sub(comment, 1, 9) ~= "dltsched:" then
      return "a job in partition " .. PARTITION .. " needs --comment \"dltsched:model=..,batch=..,iters=..\""
   end
   for _, key in ipairs(REQUIRED_KEYS) do
      if not string.find(comment, "[:,]" .. key .. "=[^,]+") then
         return "the dltsched comment misses " .. key .. "=..."
      end
   end
   return nil
end

local function asks_for_gpus(job_desc)
   for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task", "gres" }) do
      local value = job_desc[field]
      if value ~= nil and string.find(value, "gpu") then return true end
   end
   return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if not in_partition(job_desc.partition) then
      return slurm.SUCCESS
   end
   local problem = check_comment(job_desc.comment)
   if problem == nil and not asks_for_gpus(job_desc) then
      problem = "a job in partition " .. PARTITION .. " asks for GPUs: --gres=gpu[:type]:N"
   end
   if problem ~= nil then
      slurm.log_user("dltsched: %s", problem)
      return slurm.ERROR
   end
   -- held until dltsched releases it (same as sbatch --hold)
   job_desc.priority = 0
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if job_rec == nil or not in_partition(job_rec.partition) then
      return slurm.SUCCESS
   end
   if OPERATOR_UIDS[modify_uid] then
      return slurm.SUCCESS
   end
   -- a release (or any priority change) by a user: only dltsched releases jobs here
   if job_desc.priority ~= nil and job_desc.priority ~= slurm.NO_VAL then
      slurm.log_user("dltsched: jobs in partition %s are released by dltsched, not by hand", PARTITION)
      return slurm.ERROR
   end
   if job_desc.comment ~= nil then
      local problem = check_comment(job_desc.comment)
      if problem ~= nil then
         slurm.log_user("dltsched: %s", problem)
         return slurm.ERROR
      end
   end
   return slurm.SUCCESS
end

slurm.log_info("dltsched job_submit.lua loaded (partition %s)", PARTITION)
return slurm.SUCCESS
